// Force-included into every test file (see tests/CMakeLists.txt): lets Catch print a
// baton::result in REQUIRE(r) failures as its error message instead of failing to compile on
// boost's operator<< for values that have none.
#pragma once

#include <catch2/catch.hpp>

#include "base/status.h"

namespace Catch {
template <class T>
struct StringMaker<boost::system::result<T, baton::error>> {
  static std::string convert(const boost::system::result<T, baton::error>& r) {
    return r ? std::string("ok") : "error: " + r.error().message;
  }
};
}  // namespace Catch
