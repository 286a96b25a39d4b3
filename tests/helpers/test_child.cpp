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
//   spawn MS      start a grandchild (this program, "print ready sleep MS") through
//                 baton::os::spawn, wait for its "ready", print "grandchild PID"; it is never
//                 stopped or waited for here, so `exit` leaves it to the OS layer's guarantees
//   exit CODE     exit with CODE at once (std::_Exit: no destructors run)
// No OS headers: what it does to processes goes through os/process.h, the layer under test.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "os/process.h"

int main(int argc, char** argv) {
  std::vector<std::unique_ptr<char[]>> held;
  boost::asio::io_context io;
  std::vector<std::unique_ptr<baton::os::process>> grandchildren;
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
    } else if (cmd == "spawn") {
      baton::os::spawn_options o;
      o.argv = {argv[0], "print", "ready", "sleep", arg};
      auto p = baton::os::spawn(io, o);
      if (!p) {
        std::cerr << "baton_test_child: " << p.error().message << "\n";
        return 65;
      }
      bool ready = false;
      (*p)->async_read_lines([&ready](const boost::system::error_code& ec, std::string_view l) {
        ready = ready || (!ec && l == "ready");
      });
      while (!ready && io.run_one() != 0) {
      }
      if (!ready) {
        std::cerr << "baton_test_child: grandchild ended before it was ready\n";
        return 66;
      }
      std::cout << "grandchild " << (*p)->pid() << std::endl;
      grandchildren.push_back(std::move(*p));
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
