// Thin RAII wrappers over the SQLite C API: a connection, prepared statements
// with typed binds and column reads, and a transaction guard that rolls back
// unless committed. Errors are absl::Status naming the operation and carrying
// SQLite's message. Not thread-safe: one owner serializes all use.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sbp::sqlite {

class Statement;

// An open database connection.
class Database {
 public:
  // Opens (creating when missing) the file at `path`.
  static absl::StatusOr<std::unique_ptr<Database>> Open(const std::string& path);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements without results ("PRAGMA ...", DDL).
  absl::Status Exec(absl::string_view sql);
  // Compiles `sql`; `what` names the operation in errors.
  absl::StatusOr<Statement> Prepare(absl::string_view sql, absl::string_view what);
  // Rows changed by the latest INSERT/UPDATE/DELETE.
  int64_t Changes() const;
  sqlite3* handle() { return db_; }

  // An error status for `what` with the connection's current message.
  absl::Status Error(absl::string_view what, int code) const;

 private:
  explicit Database(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

// A prepared statement. Bind indexes start at 1, column indexes at 0.
class Statement {
 public:
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  ~Statement();

  // Clears bindings and rewinds; call before reusing a cached statement.
  void Reset();
  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, absl::string_view text);
  Statement& Bind(int index, double value);
  Statement& BindNull(int index);

  // Advances: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps to completion (for statements without rows).
  absl::Status Run();

  int64_t ColumnInt(int column) const;
  double ColumnDouble(int column) const;
  std::string ColumnText(int column) const;
  bool ColumnIsNull(int column) const;

 private:
  friend class Database;
  Statement(Database* db, sqlite3_stmt* stmt, std::string what)
      : db_(db), stmt_(stmt), what_(std::move(what)) {}
  Database* db_;
  sqlite3_stmt* stmt_;
  std::string what_;
  int bind_error_ = SQLITE_OK;
};

// BEGIN IMMEDIATE on construction; ROLLBACK on destruction unless Commit()ed.
class Transaction {
 public:
  static absl::StatusOr<Transaction> Begin(Database* db);
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  absl::Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_;
};

}  // namespace sbp::sqlite
