// The rendezvous store's abort key and the byte conversions its values need, shared by the
// rendezvous (distributed.cpp) and the watchdog (watchdog.cpp). Internal to core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe::distributed::store_keys {

// The first rank to name a failure writes it here; every other rank reports the same reason.
inline constexpr const char* kAbortKey = "gpipe/abort";

inline std::string bytes_to_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

inline std::vector<uint8_t> string_to_bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

}  // namespace gpipe::distributed::store_keys
