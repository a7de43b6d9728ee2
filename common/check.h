// CHECK macros for programmer errors (violated invariants, wrong shapes passed
// between our own modules). They print file:line and the message, then abort.
// Anything caused by user input or the environment returns absl::Status instead.
#pragma once

#include <sstream>
#include <string>

namespace sbp::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Swallows the stream expression in the success branch of CHECK.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace sbp::internal

#define CHECK(cond)                                               \
  (cond) ? (void)0                                                \
         : ::sbp::internal::Voidify() &                           \
               ::sbp::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define SBP_CHECK_OP(a, op, b) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) SBP_CHECK_OP(a, ==, b)
#define CHECK_NE(a, b) SBP_CHECK_OP(a, !=, b)
#define CHECK_LT(a, b) SBP_CHECK_OP(a, <, b)
#define CHECK_LE(a, b) SBP_CHECK_OP(a, <=, b)
#define CHECK_GT(a, b) SBP_CHECK_OP(a, >, b)
#define CHECK_GE(a, b) SBP_CHECK_OP(a, >=, b)
#define CHECK_OK(expr)                                  \
  do {                                                  \
    const auto& sbp_check_status_ = (expr);             \
    CHECK(sbp_check_status_.ok()) << sbp_check_status_; \
  } while (0)
