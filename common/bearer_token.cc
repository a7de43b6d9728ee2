#include "common/bearer_token.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/input_limits.h"

namespace sbp {

absl::StatusOr<std::string> ParseBearerToken(absl::string_view text, absl::string_view source) {
  const absl::string_view token = absl::StripAsciiWhitespace(text);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " holds no token"));
  }
  if (token.size() > kMaxBearerTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, " holds ", token.size(), " bytes; a token is at most ", kMaxBearerTokenBytes));
  }
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c >= 0x21 && c <= 0x7e) continue;
    const bool space = c == '\n' || c == '\r' || c == ' ' || c == '\t';
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is not one token: byte ", i + 1, " of it is ",
                     space ? "white space (two tokens or lines?)"
                           : absl::StrCat("0x", absl::Hex(c, absl::kZeroPad2)),
                     "; a token is visible ASCII characters alone (the token is not shown)"));
  }
  return std::string(token);
}

absl::StatusOr<std::string> ReadBearerTokenFile(const std::string& path) {
  // A regular file of bounded size, decided before a byte is read (a FIFO
  // named as the token file must not block the process); room for white
  // space around the longest token.
  absl::StatusOr<std::string> text =
      ReadRegularFile(path, kMaxBearerTokenBytes + 1024, "token file");
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read token file ", path, ": ", text.status().message()));
  }
  return ParseBearerToken(*text, absl::StrCat("token file ", path));
}

}  // namespace sbp
