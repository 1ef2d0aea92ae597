#include <csignal>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // A closed stdout or socket (`ferry serve | tee` whose reader went away, a restarting log
  // shipper, a client that hung up) must be a write error, not a signal that ends the process.
  std::signal(SIGPIPE, SIG_IGN);
  return ferry::cli::Main(argc, argv);
}
