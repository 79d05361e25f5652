// Typed exceptions of the engine.
//
// Why this file exists: a user who passes a bad configuration or a bad batch must be told which
// value was wrong and how to fix it, and a caller must be able to tell a configuration mistake
// from a failure inside a stage. Every exception names the offending values (GPIPE_CHECK formats
// them like TORCH_CHECK does).
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpipe {

// Base of everything the engine throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration that cannot work: balance, devices, chunks, schedule, costs.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A batch that does not fit the pipeline: empty, fewer samples than micro-batches, input and
// target batch sizes that differ.
class InputError : public Error {
 public:
  using Error::Error;
};

// The loss of a step was NaN or infinite; the step was refused and parameters are untouched.
class NonFiniteLossError : public Error {
 public:
  NonFiniteLossError(const std::string& what, double loss) : Error(what), loss_(loss) {}
  double loss() const { return loss_; }

 private:
  double loss_;
};

// A failure on one device (its worker thread, or its rank), rethrown to the caller with the
// device named; -1 when the step was stopped by another process's failure.
class DeviceError : public Error {
 public:
  DeviceError(const std::string& what, int device) : Error(what), device_(device) {}
  int device() const { return device_; }

 private:
  int device_;
};

// Thrown inside a device whose step was cancelled because another device failed. The pipeline
// never lets it escape: the caller sees the DeviceError of the device that failed first.
class AbortedError : public Error {
 public:
  using Error::Error;
};

// A broken invariant of the engine itself, not a user's mistake: a stage asked to do what the
// lowered schedule should have arranged first (a B whose R is missing, a message nobody sent).
// Seeing one means a bug in a schedule generator or in lowering; the message names the action.
class InternalError : public Error {
 public:
  using Error::Error;
};

// `text` as one printable line: line breaks and tabs become spaces, other control bytes and
// bytes that are not valid UTF-8 (a garbage file's contents quoted in a message) become \xNN.
inline std::string printable(const std::string& text) {
  std::string out;
  auto is_continuation = [&](size_t i) {
    return i < text.size() && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    // Lead bytes of well-formed UTF-8 (no overlong 0xC0/0xC1, nothing past U+10FFFF).
    const size_t length = byte < 0x80                    ? 1
                          : byte >= 0xC2 && byte <= 0xDF ? 2
                          : byte >= 0xE0 && byte <= 0xEF ? 3
                          : byte >= 0xF0 && byte <= 0xF4 ? 4
                                                         : 0;
    bool valid = length > 1;
    for (size_t k = 1; valid && k < length; ++k)
      valid = is_continuation(i + k);
    // U+0080..U+009F are control characters too.
    if (valid && byte == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) valid = false;
    if (byte == '\n' || byte == '\r' || byte == '\t') {
      out += ' ';
    } else if (length == 1 && byte >= 0x20 && byte != 0x7F) {
      out += static_cast<char>(byte);
    } else if (valid) {
      out.append(text, i, length);
      i += length - 1;
    } else {
      static const char* digits = "0123456789abcdef";
      out += "\\x";
      out += digits[byte >> 4];
      out += digits[byte & 0xF];
    }
  }
  return out;
}

// The message of `e` as one line for a user: LibTorch's errors without their C++ backtrace
// (c10::Error::what() appends the frames), printable (see printable()).
inline std::string error_message(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.pop_back();
  return printable(text);
}

}  // namespace gpipe

// GPIPE_CHECK(cond, ExceptionType, message parts...): throws ExceptionType with the parts
// concatenated (c10::str) when cond is false.
#define GPIPE_CHECK(cond, ExceptionType, ...)       \
  do {                                              \
    if (!(cond)) {                                  \
      throw ExceptionType(::c10::str(__VA_ARGS__)); \
    }                                               \
  } while (false)
