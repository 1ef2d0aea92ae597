#include "cli/commands.h"

namespace ferry::cli {

int Main(int argc, char** argv) { return 0; }

}  // namespace ferry::cli
