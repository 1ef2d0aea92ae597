# Unpacks the bundle (ferry, cuda_test and their libraries) and links the fixture path the
# binaries were built with.
[[ -d .device ]] || python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('.devpack/dev.tar.xz')).extractall('.')"
source .device/env
mkdir -p /work/shared
[[ -e /work/shared/fixtures ]] || ln -s $PWD/.devpack/fixtures /work/shared/fixtures
