// RunGranary and error-line checks for the CLI integration tests.
#include "cli_runner.h"

#include <sstream>

namespace granary::testing {

ProcessResult RunGranary(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {GRANARY_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, std::chrono::seconds(120));
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool IsErrorLine(const std::string& err, const std::string& what, const std::string& reason) {
  auto lines = Lines(err);
  return lines.size() == 1 && lines[0].starts_with("granary: " + what + ": ") &&
         lines[0].find(reason) != std::string::npos;
}

}  // namespace granary::testing
