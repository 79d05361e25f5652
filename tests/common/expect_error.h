// expect_error: the one check, for every test suite, that a call fails as a user should see.
//
// Why this file exists: this project's errors are typed and name the bad value and the fix, so
// a test of bad input checks both the type and the words. Each suite had grown its own helper;
// this is the one they share (gpipe_test adds tests/common to every test's include path).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>

#include "gpipe/errors.h"

namespace gpipe::testing {

// Runs fn and expects an exception of type E whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception thrown";
  } catch (const E& e) {
    const std::string what = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "message lacks '" << part << "': " << what;
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

}  // namespace gpipe::testing

// Expects `statement` to throw ConfigError whose message contains `needle`.
#define EXPECT_CONFIG_ERROR(statement, needle) \
  ::gpipe::testing::expect_error<::gpipe::ConfigError>([&] { statement; }, {needle})
