#include "server/sqlite.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sbp::sqlite {

absl::StatusOr<std::unique_ptr<Database>> Database::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("opening database ", path, ": ", message));
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<Database>(new Database(db));
}

Database::~Database() { sqlite3_close_v2(db_); }

absl::Status Database::Error(absl::string_view what, int code) const {
  const std::string message =
      absl::StrCat(what, ": ", sqlite3_errmsg(db_), " (sqlite code ", code, ")");
  switch (code & 0xff) {
    case SQLITE_CONSTRAINT:
      return absl::AlreadyExistsError(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status Database::Exec(absl::string_view sql) {
  char* error = nullptr;
  const std::string text(sql);
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return absl::OkStatus();
  std::string message = error ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  const std::string head = text.substr(0, text.find_first_of("\n("));
  return absl::InternalError(absl::StrCat("executing \"", head, "\": ", message));
}

absl::StatusOr<Statement> Database::Prepare(absl::string_view sql, absl::string_view what) {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(absl::StrCat("preparing ", what), rc);
  return Statement(this, stmt, std::string(what));
}

int64_t Database::Changes() const { return sqlite3_changes64(db_); }

Statement::Statement(Statement&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      what_(std::move(other.what_)),
      bind_error_(other.bind_error_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    db_ = other.db_;
    stmt_ = std::exchange(other.stmt_, nullptr);
    what_ = std::move(other.what_);
    bind_error_ = other.bind_error_;
  }
  return *this;
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  bind_error_ = SQLITE_OK;
}

Statement& Statement::Bind(int index, int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, absl::string_view text) {
  const int rc =
      sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  const int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

Statement& Statement::BindNull(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) bind_error_ = rc;
  return *this;
}

absl::StatusOr<bool> Statement::Step() {
  if (bind_error_ != SQLITE_OK) return db_->Error(absl::StrCat("binding ", what_), bind_error_);
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  absl::Status status = db_->Error(what_, rc);
  sqlite3_reset(stmt_);
  return status;
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::ColumnDouble(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::ColumnText(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt_, column));
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

absl::StatusOr<Transaction> Transaction::Begin(Database* db) {
  const int rc = sqlite3_exec(db->handle(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return db->Error("beginning a transaction", rc);
  return Transaction(db);
}

Transaction::Transaction(Transaction&& other) noexcept : db_(std::exchange(other.db_, nullptr)) {}

Transaction::~Transaction() {
  if (db_ != nullptr) sqlite3_exec(db_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

absl::Status Transaction::Commit() {
  const int rc = sqlite3_exec(db_->handle(), "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return db_->Error("committing a transaction", rc);
  db_ = nullptr;
  return absl::OkStatus();
}

}  // namespace sbp::sqlite
