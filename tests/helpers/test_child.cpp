// baton_test_child: a scriptable child process for the OS-layer tests, built for every platform
// so the same script runs natively and under wine. It runs its arguments as commands, in order:
//   print TEXT    write TEXT and a newline to stdout, flushed
//   tail TEXT     write TEXT with no newline, flushed
//   err TEXT      write TEXT and a newline to stderr
//   alloc MIB     allocate MIB mebibytes, write to every page (so it is resident), then print
//                 "allocated MIB"; the memory is held until exit
//   sleep MS      sleep MS milliseconds
//   echo          copy stdin lines to stdout as "got LINE" until end of input, then "stdin closed"
//   env NAME      print NAME's value, or "<unset>"
//   exit CODE     exit with CODE at once
// Plain standard C++ (no OS headers), so it says nothing about the OS layer it exercises.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  std::vector<std::unique_ptr<char[]>> held;
  for (int i = 1; i < argc; ++i) {
    const std::string_view cmd = argv[i];
    if (cmd == "echo") {
      std::string line;
      while (std::getline(std::cin, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::cout << "got " << line << std::endl;
      }
      std::cout << "stdin closed" << std::endl;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "baton_test_child: " << cmd << " needs an argument\n";
      return 64;
    }
    const std::string arg = argv[++i];
    if (cmd == "print") {
      std::cout << arg << std::endl;
    } else if (cmd == "tail") {
      std::cout << arg << std::flush;
    } else if (cmd == "err") {
      std::cerr << arg << std::endl;
    } else if (cmd == "alloc") {
      const std::size_t bytes = std::stoull(arg) * 1024 * 1024;
      auto block = std::make_unique<char[]>(bytes);
      // Values that differ per page, so no page can be shared or deduplicated.
      for (std::size_t off = 0; off < bytes; off += 4096) block[off] = static_cast<char>(off >> 12);
      held.push_back(std::move(block));
      std::cout << "allocated " << arg << std::endl;
    } else if (cmd == "sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(arg)));
    } else if (cmd == "env") {
      const char* v = std::getenv(arg.c_str());
      std::cout << (v != nullptr ? v : "<unset>") << std::endl;
    } else if (cmd == "exit") {
      std::cout.flush();
      std::_Exit(std::stoi(arg));
    } else {
      std::cerr << "baton_test_child: unknown command " << cmd << "\n";
      return 64;
    }
  }
  return 0;
}
