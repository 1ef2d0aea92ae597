# cmake -DINPUT=file -DOUTPUT=file.cc -DNAMESPACE=ns -DFUNCTION=Name -P embed_text.cmake
# Writes a C++ source defining `std::string_view ns::Name()` that returns the bytes of
# INPUT, so that data the binary needs travels inside it (no path to the source tree).
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR bytes "${hex_length} / 2")
# 32 bytes a line, each as a character literal.
string(REGEX REPLACE "(................................................................)" "\\1\n" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," body "${hex}")
get_filename_component(input_name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp" "// Generated from ${input_name} by cmake/embed_text.cmake; do not edit.
#include <string_view>

namespace ${NAMESPACE} {
namespace {
constexpr char kBytes[] = {
${body}
'\\0'};
}  // namespace

std::string_view ${FUNCTION}() { return std::string_view(kBytes, ${bytes}); }

}  // namespace ${NAMESPACE}
")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
