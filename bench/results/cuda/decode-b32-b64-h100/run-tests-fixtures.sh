#!/bin/bash
# The cuda_test cases that need the llama fixtures and the demo decoder.
python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('.devpack2/dev.tar.xz')).extractall('.')"
mkdir -p /work/shared/fixtures/models && python3 -c "import lzma,tarfile; tarfile.open(fileobj=lzma.open('.devpack2/fix.tar.xz')).extractall('/work/shared/fixtures/models')"
source .device/env
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 cuda_test --gtest_brief=1 --gtest_filter='CudaEngineBuildTest.*:CudaKvSizingTest.*:CudaDemoModelTest.*:CudaPrefixCacheTest.*:GpuContinuousBatcherTest.*:*StepGraphTest.*:CudaModelTest*:*CudaModel*' 2>&1 | tee $OUT/cuda-test-fixtures.txt | tail -30
