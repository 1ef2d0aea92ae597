// `ferry` subcommands: argument handling only; the work lives in the modules below.
#pragma once

namespace ferry::cli {

int Main(int argc, char** argv);

}  // namespace ferry::cli
