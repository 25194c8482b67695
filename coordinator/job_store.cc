#include "coordinator/job_store.h"

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/mutex.h"
#include "common/status_macros.h"

namespace mtrain {
namespace {

// ---------------------------------------------------------------- file format
//
// One SQLite database, journal in WAL mode. The header's application_id marks the file as
// a job store (so that an unrelated SQLite file handed over by mistake is refused rather
// than written into) and user_version holds the schema version. A schema change bumps
// kSchemaVersion and adds an upgrade step in Open; an older binary refuses a newer file.
//
// Protobuf values (JobSpec, StepMetrics) are stored as serialized binary protobuf BLOBs,
// not JSON: the encoding is exact (doubles round-trip bit for bit), compact, and a field
// added to the .proto later still parses from old rows (and is kept as unknown by old
// binaries). Columns exist only for what SQL itself has to read or order by.
// Version 2 added jobs.name and jobs.ended_unix_ms (filters and retention in SQL) and
// their indexes; Open upgrades a version 1 file in place.
constexpr int kSchemaVersion = 2;
constexpr int32_t kApplicationId = 0x6d74726a;  // "mtrj": mtrain job store.

constexpr char kCreateSchemaSql[] = R"sql(
-- id is the N of "job-N". AUTOINCREMENT (rather than a plain rowid, which is max+1) keeps
-- the high-water mark in sqlite_sequence, so N is never reused even if rows were removed.
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  spec BLOB NOT NULL,                     -- serialized JobSpec
  state INTEGER NOT NULL,                 -- JobState
  step INTEGER NOT NULL DEFAULT 0,
  loss REAL NOT NULL DEFAULT 0,
  tokens_per_second REAL NOT NULL DEFAULT 0,
  generation INTEGER NOT NULL DEFAULT 0,
  restarts INTEGER NOT NULL DEFAULT 0,
  message TEXT NOT NULL DEFAULT '',
  submitted_unix_ms INTEGER NOT NULL,
  updated_unix_ms INTEGER NOT NULL,
  latest BLOB,                            -- serialized StepMetrics; NULL before any step
  name TEXT NOT NULL DEFAULT '',          -- spec.name, for the name filter of listings
  ended_unix_ms INTEGER                   -- when it became terminal; NULL before
) STRICT;

-- JobStatus.workers, by global rank: rows rather than a packed list so that no separator
-- can collide with a worker id.
CREATE TABLE job_workers (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  rank INTEGER NOT NULL,
  worker_id TEXT NOT NULL,
  PRIMARY KEY (job_id, rank)
) STRICT, WITHOUT ROWID;

-- Append-only; id gives the order of appending (rows go only with their job).
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  unix_ms INTEGER NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL
) STRICT;
CREATE INDEX events_by_job ON events(job_id, id);

-- One row per step; a step repeated after a restart replaces its row.
CREATE TABLE steps (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  step INTEGER NOT NULL,
  metrics BLOB NOT NULL,                  -- serialized StepMetrics
  PRIMARY KEY (job_id, step)
) STRICT, WITHOUT ROWID;
)sql";

// The indexes of listings and retention (schema version 2): a state or name filter reads
// its matching rows in job-number order, and the retention sweep finds ended jobs without
// a scan. Partial: a job that has not ended has no place in the retention index.
constexpr char kCreateListIndexesSql[] = R"sql(
CREATE INDEX jobs_by_state ON jobs(state, id);
CREATE INDEX jobs_by_name ON jobs(name, id);
CREATE INDEX jobs_by_end ON jobs(ended_unix_ms) WHERE ended_unix_ms IS NOT NULL;
)sql";

// How long a statement waits for a lock held by another connection (e.g. someone
// inspecting the file with the sqlite3 shell) before failing with UNAVAILABLE.
constexpr int kBusyTimeoutMs = 5000;

constexpr char kJobColumns[] =
    "id, spec, state, step, loss, tokens_per_second, generation, restarts, message, "
    "submitted_unix_ms, updated_unix_ms, latest, ended_unix_ms";

// Maps SQLite's primary result codes to canonical codes with their retry meaning.
absl::StatusCode CodeForSqlite(int rc) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_TOOBIG:
      return absl::StatusCode::kInvalidArgument;
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  return absl::Status(CodeForSqlite(rc), absl::StrCat("job store: ", what, ": ", sqlite3_errstr(rc),
                                                      " (", db ? sqlite3_errmsg(db) : "", ")"));
}

// "PENDING" for JOB_STATE_PENDING: the short names of the state diagram.
std::string StateName(JobState state) {
  if (!JobState_IsValid(state)) return absl::StrCat("JobState(", static_cast<int>(state), ")");
  std::string name = JobState_Name(state);
  absl::string_view short_name = name;
  absl::ConsumePrefix(&short_name, "JOB_STATE_");
  return std::string(short_name);
}

std::string JobIdFor(int64_t n) { return absl::StrCat("job-", n); }

// The N of "job-N", only for the exact spelling CreateJob hands out (so "job-01" or
// "job-+1" do not alias job-1).
std::optional<int64_t> ParseJobId(absl::string_view job_id) {
  absl::string_view digits = job_id;
  if (!absl::ConsumePrefix(&digits, "job-") || digits.empty() || digits[0] == '0') {
    return std::nullopt;
  }
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(digits, &n)) return std::nullopt;  // Overflow.
  return n;
}

// A stored state is only ever written from a valid JobState; anything else is corruption.
absl::StatusOr<JobState> StateFromColumn(int64_t value, absl::string_view job_id) {
  if (value < 0 || value > INT32_MAX || !JobState_IsValid(static_cast<int>(value))) {
    return absl::DataLossError(
        absl::StrCat(job_id, ": stored state ", value, " is not a JobState"));
  }
  return static_cast<JobState>(value);
}

absl::Status JobNotFound(absl::string_view job_id) {
  return absl::NotFoundError(absl::StrCat("job not found: '", absl::CEscape(job_id), "'"));
}

// A statement compiled once at Open and reused by every call.
class Statement {
 public:
  explicit Statement(const char* sql) : sql_(sql) {}
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement() { sqlite3_finalize(stmt_); }

  absl::Status Prepare(sqlite3* db) {
    const int rc =
        sqlite3_prepare_v3(db, sql_.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db, rc, absl::StrCat("preparing '", sql_, "'"));
    return absl::OkStatus();
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  const std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

// One use of a prepared statement: bind in parameter order, step, read columns. Resets the
// statement when it goes out of scope, so that the next use starts clean and a finished
// read does not keep its snapshot (which would stop WAL checkpoints) open.
class Query {
 public:
  explicit Query(const Statement& statement) : stmt_(statement.get()) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  ~Query() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  // SQLITE_TRANSIENT: SQLite copies the bytes, so a temporary argument is safe.
  Query& Bind(int64_t value) { return Check(sqlite3_bind_int64(stmt_, next_++, value)); }
  Query& Bind(double value) { return Check(sqlite3_bind_double(stmt_, next_++, value)); }
  Query& Bind(absl::string_view text) {
    return Check(sqlite3_bind_text64(stmt_, next_++, text.data(), text.size(), SQLITE_TRANSIENT,
                                     SQLITE_UTF8));
  }
  Query& BindBlob(absl::string_view bytes) {
    return Check(sqlite3_bind_blob64(stmt_, next_++, bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  }
  Query& BindNull() { return Check(sqlite3_bind_null(stmt_, next_++)); }

  // True with a row to read, false when the statement is done.
  absl::StatusOr<bool> Step() {
    if (bind_rc_ != SQLITE_OK) return Error(bind_rc_);
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return Error(rc);
  }
  // Runs a statement that returns no rows.
  absl::Status Run() { return Step().status(); }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const { return sqlite3_column_double(stmt_, column); }
  bool IsNull(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::string Bytes(int column) const {
    // The pointer first, then the size (the order SQLite documents).
    const char* data = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
    const int size = sqlite3_column_bytes(stmt_, column);
    return data == nullptr ? std::string() : std::string(data, size);
  }

 private:
  Query& Check(int rc) {
    if (rc != SQLITE_OK && bind_rc_ == SQLITE_OK) bind_rc_ = rc;
    return *this;
  }
  absl::Status Error(int rc) const {
    return SqliteError(sqlite3_db_handle(stmt_), rc, sqlite3_sql(stmt_));
  }

  sqlite3_stmt* const stmt_;
  int next_ = 1;
  int bind_rc_ = SQLITE_OK;  // The first binding error, reported by Step.
};

// Runs a one-row query (a PRAGMA) and returns its first column.
absl::StatusOr<std::string> QueryText(sqlite3* db, const char* sql) {
  Statement statement(sql);
  RETURN_IF_ERROR(statement.Prepare(db));
  Query query(statement);
  ASSIGN_OR_RETURN(const bool row, query.Step());
  if (!row) return std::string();
  return query.Bytes(0);
}

absl::StatusOr<int64_t> QueryInt(sqlite3* db, const char* sql) {
  Statement statement(sql);
  RETURN_IF_ERROR(statement.Prepare(db));
  Query query(statement);
  ASSIGN_OR_RETURN(const bool row, query.Step());
  return row ? query.Int(0) : 0;
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &error);
  std::string detail = error ? error : "";
  sqlite3_free(error);
  if (rc != SQLITE_OK) return SqliteError(db, rc, detail);
  return absl::OkStatus();
}

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};

}  // namespace

bool IsTerminalJobState(JobState state) {
  return state == JOB_STATE_SUCCEEDED || state == JOB_STATE_FAILED || state == JOB_STATE_CANCELLED;
}

bool IsAllowedJobTransition(JobState from, JobState to) {
  switch (from) {
    case JOB_STATE_PENDING:
      // FAILED: a job that can never be placed (its stored spec no longer validates, or
      // cannot be planned) says so instead of waiting forever.
      return to == JOB_STATE_PLACING || to == JOB_STATE_FAILED || to == JOB_STATE_CANCELLED;
    case JOB_STATE_PLACING:
      return to == JOB_STATE_RUNNING || to == JOB_STATE_PENDING || to == JOB_STATE_FAILED ||
             to == JOB_STATE_CANCELLED;
    case JOB_STATE_RUNNING:
      return to == JOB_STATE_SUCCEEDED || to == JOB_STATE_FAILED || to == JOB_STATE_CANCELLED ||
             to == JOB_STATE_PLACING;
    default:  // Terminal states, UNSPECIFIED and values outside the enum go nowhere.
      return false;
  }
}

struct JobStore::Impl {
  // Declared first so that it is destroyed last, after every statement is finalized.
  std::unique_ptr<sqlite3, DbCloser> db;

  // One connection, used by one thread at a time (hence SQLITE_OPEN_NOMUTEX); it also
  // makes each read-then-write below atomic with respect to the other threads.
  Mutex mutex;

  // IMMEDIATE takes the write lock up front: a read-modify-write never has to upgrade a
  // read lock, which can fail with SQLITE_BUSY halfway through.
  Statement begin ABSL_GUARDED_BY(mutex){"BEGIN IMMEDIATE"};
  Statement commit ABSL_GUARDED_BY(mutex){"COMMIT"};
  Statement rollback ABSL_GUARDED_BY(mutex){"ROLLBACK"};

  Statement insert_job ABSL_GUARDED_BY(mutex){
      "INSERT INTO jobs (spec, state, submitted_unix_ms, updated_unix_ms, name) "
      "VALUES (?, ?, ?, ?, ?)"};
  Statement select_job ABSL_GUARDED_BY(mutex){
      absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id = ?").c_str()};
  Statement select_all_jobs ABSL_GUARDED_BY(mutex){
      absl::StrCat("SELECT ", kJobColumns, " FROM jobs ORDER BY id").c_str()};
  Statement select_state ABSL_GUARDED_BY(mutex){"SELECT state FROM jobs WHERE id = ?"};
  Statement update_state_and_message ABSL_GUARDED_BY(mutex){
      "UPDATE jobs SET state = ?, message = ?, updated_unix_ms = ?, ended_unix_ms = ? "
      "WHERE id = ?"};
  Statement update_placement ABSL_GUARDED_BY(mutex){
      "UPDATE jobs SET generation = ?, restarts = ?, updated_unix_ms = ? WHERE id = ?"};
  // coalesce: a step without a loss keeps the last loss.
  Statement update_progress ABSL_GUARDED_BY(mutex){
      "UPDATE jobs SET step = ?, loss = coalesce(?, loss), tokens_per_second = ?, latest = ?, "
      "updated_unix_ms = ? WHERE id = ?"};

  Statement delete_workers ABSL_GUARDED_BY(mutex){"DELETE FROM job_workers WHERE job_id = ?"};
  Statement insert_worker ABSL_GUARDED_BY(mutex){
      "INSERT INTO job_workers (job_id, rank, worker_id) VALUES (?, ?, ?)"};
  Statement select_workers ABSL_GUARDED_BY(mutex){
      "SELECT worker_id FROM job_workers WHERE job_id = ? ORDER BY rank"};
  Statement select_all_workers ABSL_GUARDED_BY(mutex){
      "SELECT job_id, worker_id FROM job_workers ORDER BY job_id, rank"};

  Statement insert_event ABSL_GUARDED_BY(mutex){
      "INSERT INTO events (job_id, unix_ms, kind, message) VALUES (?, ?, ?, ?)"};
  Statement select_events ABSL_GUARDED_BY(mutex){
      "SELECT unix_ms, kind, message FROM events WHERE job_id = ? ORDER BY id"};
  // A range of events_by_job (job_id, id).
  Statement select_event_page ABSL_GUARDED_BY(mutex){
      "SELECT id, unix_ms, kind, message FROM events WHERE job_id = ? AND id > ? ORDER BY id "
      "LIMIT ?"};

  Statement upsert_step ABSL_GUARDED_BY(mutex){
      "INSERT INTO steps (job_id, step, metrics) VALUES (?, ?, ?) "
      "ON CONFLICT (job_id, step) DO UPDATE SET metrics = excluded.metrics"};
  // A job and everything recorded under it (children first: foreign keys are on).
  Statement delete_job_workers ABSL_GUARDED_BY(mutex){"DELETE FROM job_workers WHERE job_id = ?"};
  Statement delete_job_events ABSL_GUARDED_BY(mutex){"DELETE FROM events WHERE job_id = ?"};
  Statement delete_job_steps ABSL_GUARDED_BY(mutex){"DELETE FROM steps WHERE job_id = ?"};
  Statement delete_job ABSL_GUARDED_BY(mutex){"DELETE FROM jobs WHERE id = ?"};
  // Retention: ended jobs, longest ended first (reads the partial index jobs_by_end).
  Statement select_ended_before ABSL_GUARDED_BY(mutex){
      "SELECT id FROM jobs WHERE ended_unix_ms IS NOT NULL AND ended_unix_ms <= ? "
      "ORDER BY ended_unix_ms, id LIMIT ?"};

  // LIMIT -1 is SQLite's "no limit".
  Statement select_steps ABSL_GUARDED_BY(mutex){
      "SELECT metrics FROM steps WHERE job_id = ? AND step > ? ORDER BY step LIMIT ?"};

  // Every mutation runs inside one of these: all of its statements commit together or not
  // at all, and COMMIT returning means the change is in the WAL (and, with synchronous=FULL,
  // on disk). Rolls back unless Commit succeeded.
  // Made only by a holder of `mutex` (every JobStore method takes it first); its methods
  // tell the analysis so, which cannot follow the lock through impl_.
  class Transaction {
   public:
    explicit Transaction(Impl* impl) : impl_(impl) {}
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction() {
      // A failed COMMIT may or may not have rolled back already; ROLLBACK outside a
      // transaction is an error, hence the autocommit check.
      impl_->mutex.AssertHeld();
      if (begun_ && !committed_ && !sqlite3_get_autocommit(impl_->db.get())) {
        Query query(impl_->rollback);
        query.Run().IgnoreError();  // Nothing better to do: the caller already has an error.
      }
    }

    absl::Status Begin() {
      impl_->mutex.AssertHeld();
      Query query(impl_->begin);
      absl::Status status = query.Run();
      begun_ = status.ok();
      return status;
    }
    absl::Status Commit() {
      impl_->mutex.AssertHeld();
      Query query(impl_->commit);
      absl::Status status = query.Run();
      committed_ = status.ok();
      return status;
    }

   private:
    Impl* const impl_;
    bool begun_ = false;
    bool committed_ = false;
  };

  absl::Status PrepareAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    for (Statement* s : {&begin,
                         &commit,
                         &rollback,
                         &insert_job,
                         &select_job,
                         &select_all_jobs,
                         &select_state,
                         &update_state_and_message,
                         &update_placement,
                         &update_progress,
                         &delete_workers,
                         &insert_worker,
                         &select_workers,
                         &select_all_workers,
                         &insert_event,
                         &select_events,
                         &upsert_step,
                         &select_steps,
                         &delete_job_workers,
                         &delete_job_events,
                         &delete_job_steps,
                         &delete_job,
                         &select_ended_before,
                         &select_event_page}) {
      RETURN_IF_ERROR(s->Prepare(db.get()));
    }
    return absl::OkStatus();
  }

  // The current state of job n; NOT_FOUND (naming job_id) if there is no such job.
  absl::StatusOr<JobState> LoadState(int64_t n, const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    Query query(select_state);
    query.Bind(n);
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) return JobNotFound(job_id);
    return StateFromColumn(query.Int(0), job_id);
  }

  absl::Status InsertEvent(int64_t n, int64_t unix_ms, absl::string_view kind,
                           absl::string_view message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    Query query(insert_event);
    query.Bind(n).Bind(unix_ms).Bind(kind).Bind(message);
    return query.Run();
  }

  // Reads the current row of select_job / select_all_jobs (columns kJobColumns).
  static absl::StatusOr<JobStatus> ReadJob(const Query& query) {
    JobStatus job;
    job.set_job_id(JobIdFor(query.Int(0)));
    if (!job.mutable_spec()->ParseFromString(query.Bytes(1))) {
      return absl::DataLossError(absl::StrCat(job.job_id(), ": stored spec does not parse"));
    }
    ASSIGN_OR_RETURN(const JobState state, StateFromColumn(query.Int(2), job.job_id()));
    job.set_state(state);
    job.set_step(query.Int(3));
    job.set_loss(query.Double(4));
    job.set_tokens_per_second(query.Double(5));
    job.set_generation(query.Int(6));
    job.set_restarts(static_cast<int32_t>(query.Int(7)));
    job.set_message(query.Bytes(8));
    job.set_submitted_unix_ms(query.Int(9));
    job.set_updated_unix_ms(query.Int(10));
    if (!query.IsNull(11) && !job.mutable_latest()->ParseFromString(query.Bytes(11))) {
      return absl::DataLossError(absl::StrCat(job.job_id(), ": stored latest step does not parse"));
    }
    if (!query.IsNull(12)) job.set_ended_unix_ms(query.Int(12));
    return job;
  }
};

namespace {

// True for a new (empty) database, false for a job store of the current schema version or
// of one Open upgrades (1); an error for anything else. Only reads.
absl::StatusOr<bool> IsNewDatabase(sqlite3* db, const std::string& path) {
  ASSIGN_OR_RETURN(const int64_t application_id, QueryInt(db, "PRAGMA application_id"));
  ASSIGN_OR_RETURN(const int64_t version, QueryInt(db, "PRAGMA user_version"));
  ASSIGN_OR_RETURN(const int64_t objects, QueryInt(db, "SELECT count(*) FROM sqlite_schema"));
  if (application_id == 0 && version == 0 && objects == 0) return true;
  if (application_id != kApplicationId) {
    return absl::DataLossError(absl::StrCat(
        "job store: ", path, " is an SQLite database but not a job store (application_id ",
        application_id, ", ", objects, " schema objects)"));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat("job store: ", path, " has schema version ",
                                                      version, ", newer than this binary's ",
                                                      kSchemaVersion, "; use a newer coordinator"));
  }
  if (version != kSchemaVersion && version != 1) {
    return absl::DataLossError(
        absl::StrCat("job store: ", path, " has unknown schema version ", version));
  }
  return false;
}

// Version 1 -> 2: the name and end-time columns, filled from what the rows already hold
// (the name from the stored spec; for an ended job, its last update is when it ended), and
// their indexes.
absl::Status UpgradeFromVersion1(sqlite3* db, const std::string& path) {
  RETURN_IF_ERROR(Exec(db,
                       "ALTER TABLE jobs ADD COLUMN name TEXT NOT NULL DEFAULT '';"
                       "ALTER TABLE jobs ADD COLUMN ended_unix_ms INTEGER;"));
  RETURN_IF_ERROR(Exec(
      db, absl::StrCat("UPDATE jobs SET ended_unix_ms = updated_unix_ms "
                       "WHERE state IN (",
                       JOB_STATE_SUCCEEDED, ", ", JOB_STATE_FAILED, ", ", JOB_STATE_CANCELLED, ");")
              .c_str()));
  Statement select("SELECT id, spec FROM jobs");
  Statement update("UPDATE jobs SET name = ? WHERE id = ?");
  RETURN_IF_ERROR(select.Prepare(db));
  RETURN_IF_ERROR(update.Prepare(db));
  Query rows(select);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, rows.Step());
    if (!row) break;
    JobSpec spec;
    // A spec that does not parse is reported when the job is read; its name stays empty.
    if (!spec.ParseFromString(rows.Bytes(1)) || spec.name().empty()) continue;
    Query set_name(update);
    set_name.Bind(absl::string_view(spec.name())).Bind(rows.Int(0));
    RETURN_IF_ERROR(set_name.Run());
  }
  const std::string finish =
      absl::StrCat(kCreateListIndexesSql, "PRAGMA user_version = ", kSchemaVersion, ";");
  if (absl::Status s = Exec(db, finish.c_str()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("job store: upgrading ", path,
                                               " from schema version 1: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CreateOrUpgradeSchema(sqlite3* db, const std::string& path) {
  ASSIGN_OR_RETURN(const bool is_new, IsNewDatabase(db, path));
  if (!is_new) {
    ASSIGN_OR_RETURN(const int64_t version, QueryInt(db, "PRAGMA user_version"));
    return version == 1 ? UpgradeFromVersion1(db, path) : absl::OkStatus();
  }
  const std::string create = absl::StrCat(kCreateSchemaSql, kCreateListIndexesSql,
                                          "PRAGMA application_id = ", kApplicationId,
                                          "; PRAGMA user_version = ", kSchemaVersion, ";");
  return Exec(db, create.c_str());
}

// Creates the schema in a new (empty) database, or checks (and upgrades) an existing one.
// Runs in one
// transaction so that two processes opening a new file at once cannot both create it (the
// check is repeated under the write lock), and a crash halfway leaves an empty file rather
// than half a schema.
absl::Status CreateOrCheckSchema(sqlite3* db, const std::string& path) {
  RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE"));
  absl::Status status = CreateOrUpgradeSchema(db, path);
  if (!status.ok()) {
    Exec(db, "ROLLBACK").IgnoreError();  // The error that matters is `status`.
    return status;
  }
  return Exec(db, "COMMIT");
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  // SQLite would open "" as a private temporary database: nothing would survive.
  if (path.empty()) return absl::InvalidArgumentError("job store: path must not be empty");
  auto impl = std::make_unique<Impl>();
  sqlite3* raw = nullptr;
  const int open_rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  impl->db.reset(raw);  // Even on failure SQLite allocates a handle that must be closed.
  if (open_rc != SQLITE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("job store: cannot open ", path, ": ", sqlite3_errstr(open_rc)));
  }
  sqlite3* db = raw;
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (sqlite3_db_readonly(db, "main") == 1) {
    return absl::InvalidArgumentError(absl::StrCat("job store: ", path, " is not writable"));
  }

  // The first statement reads the file header: a file that is not SQLite fails here, and
  // IsNewDatabase refuses another program's database, both before anything (such as
  // switching the journal mode) could write to the file.
  if (absl::StatusOr<int64_t> id = QueryInt(db, "PRAGMA application_id"); !id.ok()) {
    if (id.status().code() == absl::StatusCode::kDataLoss) {
      return absl::DataLossError(
          absl::StrCat("job store: ", path, " is not an SQLite database: ", id.status().message()));
    }
    return id.status();
  }
  RETURN_IF_ERROR(IsNewDatabase(db, path).status());

  // WAL: a commit appends to the log, and a process killed at any point leaves the last
  // committed transaction intact (the next open replays or ignores the log tail).
  // synchronous=FULL syncs the log at every commit so that a commit survives an OS crash
  // or power loss as well; the price is one fsync per mutation, small next to a training
  // step.
  ASSIGN_OR_RETURN(const std::string mode, QueryText(db, "PRAGMA journal_mode = WAL"));
  // ":memory:" cannot have a WAL (nor any durability); allowed for tests that want none.
  if (absl::AsciiStrToLower(mode) != "wal" && path != ":memory:") {
    return absl::InvalidArgumentError(absl::StrCat(
        "job store: ", path, " cannot use a write-ahead log (journal mode ", mode, ")"));
  }
  RETURN_IF_ERROR(Exec(db, "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;"));
  RETURN_IF_ERROR(CreateOrCheckSchema(db, path));
  absl::Status prepared;
  {
    MutexLock lock(&impl->mutex);  // no other thread sees impl yet; the analysis wants it
    prepared = impl->PrepareAll();
  }
  if (absl::Status s = prepared; !s.ok()) {
    // Our application_id and version, yet a statement does not compile: the schema was
    // altered behind our back.
    return absl::DataLossError(
        absl::StrCat("job store: ", path, " does not have the expected schema: ", s.message()));
  }
  return std::unique_ptr<JobStore>(new JobStore(std::move(impl)));
}

JobStore::JobStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobStore::JobStore() = default;
JobStore::~JobStore() = default;

absl::StatusOr<std::string> JobStore::CreateJob(const JobSpec& spec, int64_t now_ms) {
  std::string spec_bytes;
  if (!spec.SerializeToString(&spec_bytes)) {
    return absl::InvalidArgumentError("spec: cannot be serialized");
  }
  MutexLock lock(&impl_->mutex);
  Impl::Transaction txn(impl_.get());
  RETURN_IF_ERROR(txn.Begin());
  {
    Query query(impl_->insert_job);
    query.BindBlob(spec_bytes)
        .Bind(static_cast<int64_t>(JOB_STATE_PENDING))
        .Bind(now_ms)
        .Bind(now_ms)
        .Bind(absl::string_view(spec.name()));
    RETURN_IF_ERROR(query.Run());
  }
  const int64_t n = sqlite3_last_insert_rowid(impl_->db.get());
  RETURN_IF_ERROR(impl_->InsertEvent(n, now_ms, "submitted", spec.name()));
  RETURN_IF_ERROR(txn.Commit());
  return JobIdFor(n);
}

absl::StatusOr<JobStatus> JobStore::GetJob(const std::string& job_id) const {
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  // No transaction needed for the two reads: every writer holds the mutex too.
  MutexLock lock(&impl_->mutex);
  JobStatus job;
  {
    Query query(impl_->select_job);
    query.Bind(*n);
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) return JobNotFound(job_id);
    ASSIGN_OR_RETURN(job, Impl::ReadJob(query));
  }
  Query query(impl_->select_workers);
  query.Bind(*n);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    job.add_workers(query.Bytes(0));
  }
  return job;
}

absl::StatusOr<std::vector<JobStatus>> JobStore::ListJobs() const {
  MutexLock lock(&impl_->mutex);
  std::vector<JobStatus> jobs;
  std::map<int64_t, size_t> index_of;  // Job number -> position in `jobs`.
  {
    Query query(impl_->select_all_jobs);
    while (true) {
      ASSIGN_OR_RETURN(const bool row, query.Step());
      if (!row) break;
      ASSIGN_OR_RETURN(JobStatus job, Impl::ReadJob(query));
      index_of[query.Int(0)] = jobs.size();
      jobs.push_back(std::move(job));
    }
  }
  Query query(impl_->select_all_workers);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    auto it = index_of.find(query.Int(0));
    if (it != index_of.end()) jobs[it->second].add_workers(query.Bytes(1));
  }
  return jobs;
}

namespace {

// The smallest string above every string that starts with `prefix` (byte order), so that
// "name >= prefix AND name < bound" is an index range; nullopt when there is none (the
// prefix is all 0xff bytes): then "name >= prefix" alone.
std::optional<std::string> PrefixUpperBound(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (prefix.empty()) return std::nullopt;
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

// The longest start of `text` of at most `max_bytes` that does not end inside a UTF-8
// sequence (a proto3 string must stay valid UTF-8), with "..." when cut.
std::string ShortenText(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes;
  // Back off continuation bytes (10xxxxxx) to the start of the sequence they belong to.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

// The listing form of a job too large to list whole (see kMaxListedJobBytes).
void ShortenForListing(JobStatus* job) {
  std::string name = ShortenText(job->spec().name(), kShortenedTextBytes);
  job->clear_spec();
  job->mutable_spec()->set_name(std::move(name));
  job->set_message(ShortenText(job->message(), kShortenedTextBytes));
  if (job->has_latest()) {
    job->mutable_latest()->set_engine(ShortenText(job->latest().engine(), kShortenedTextBytes));
  }
  job->set_listing_shortened(true);
}

// What a listing shows of job n when its stored record does not parse: its id, its state
// when that is readable, and why the rest is missing.
JobStatus DamagedListing(int64_t n, int64_t state, const absl::Status& why) {
  JobStatus job;
  job.set_job_id(JobIdFor(n));
  if (absl::StatusOr<JobState> parsed = StateFromColumn(state, job.job_id()); parsed.ok()) {
    job.set_state(*parsed);
  }
  job.set_message(ShortenText(absl::StrCat("the stored job cannot be read: ", why.message()),
                              kShortenedTextBytes));
  job.set_listing_shortened(true);
  return job;
}

}  // namespace

absl::StatusOr<JobListPage> JobStore::ListJobs(const JobListQuery& list) const {
  // The statement depends on which filters are set, so it is compiled per call (cheap next
  // to reading a page) with every value bound, never spliced into the text.
  std::string sql = absl::StrCat("SELECT ", kJobColumns, " FROM jobs WHERE id > ?");
  if (!list.states.empty()) {
    for (JobState state : list.states) {
      if (!JobState_IsValid(state) || state == JOB_STATE_UNSPECIFIED) {
        return absl::InvalidArgumentError(
            absl::StrCat("states: ", StateName(state),
                         " is not a job state [rule: one of PENDING, PLACING, "
                         "RUNNING, SUCCEEDED, FAILED, CANCELLED]"));
      }
    }
    absl::StrAppend(&sql, " AND state IN (?");
    for (size_t i = 1; i < list.states.size(); ++i) absl::StrAppend(&sql, ", ?");
    absl::StrAppend(&sql, ")");
  }
  const std::optional<std::string> name_bound =
      list.name_prefix.empty() ? std::nullopt : PrefixUpperBound(list.name_prefix);
  if (!list.name_prefix.empty()) absl::StrAppend(&sql, " AND name >= ?");
  if (name_bound) absl::StrAppend(&sql, " AND name < ?");
  // One row beyond the page says whether there are more, without a count.
  absl::StrAppend(&sql, " ORDER BY id LIMIT ?");

  MutexLock lock(&impl_->mutex);
  Statement statement(sql.c_str());
  RETURN_IF_ERROR(statement.Prepare(impl_->db.get()));
  Query query(statement);
  query.Bind(list.after_job);
  for (JobState state : list.states) query.Bind(static_cast<int64_t>(state));
  if (!list.name_prefix.empty()) query.Bind(absl::string_view(list.name_prefix));
  if (name_bound) query.Bind(absl::string_view(*name_bound));
  query.Bind(list.max_jobs < 0 ? int64_t{-1} : list.max_jobs + 1);

  JobListPage page;
  int64_t bytes = 0;
  int64_t last = 0;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    if (list.max_jobs >= 0 && static_cast<int64_t>(page.jobs.size()) >= list.max_jobs) {
      page.next_after_job = last;
      break;
    }
    const int64_t n = query.Int(0);
    absl::StatusOr<JobStatus> read = Impl::ReadJob(query);
    if (!read.ok() && list.list_damaged && read.status().code() == absl::StatusCode::kDataLoss) {
      read = DamagedListing(n, query.Int(2), read.status());
    }
    if (!read.ok()) return read.status();
    JobStatus job = *std::move(read);
    if (list.with_workers) {
      Query workers(impl_->select_workers);
      workers.Bind(n);
      while (true) {
        ASSIGN_OR_RETURN(const bool worker, workers.Step());
        if (!worker) break;
        job.add_workers(workers.Bytes(0));
      }
    }
    if (list.max_bytes >= 0) {
      if (static_cast<int64_t>(job.ByteSizeLong()) > kMaxListedJobBytes) {
        ShortenForListing(&job);
      }
      // The repeated field's tag and length prefix: a few bytes more than the job itself.
      const int64_t size = static_cast<int64_t>(job.ByteSizeLong()) + 8;
      if (!page.jobs.empty() && bytes + size > list.max_bytes) {
        page.next_after_job = last;
        break;
      }
      bytes += size;
    }
    page.jobs.push_back(std::move(job));
    last = n;
  }
  return page;
}

absl::Status JobStore::DeleteJob(const std::string& job_id) {
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  Impl::Transaction txn(impl_.get());
  RETURN_IF_ERROR(txn.Begin());
  ASSIGN_OR_RETURN(const JobState state, impl_->LoadState(*n, job_id));
  if (!IsTerminalJobState(state)) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " is ", StateName(state),
                     "; only an ended job (SUCCEEDED, FAILED, CANCELLED) can be deleted: "
                     "cancel it first"));
  }
  for (Statement* statement : {&impl_->delete_job_workers, &impl_->delete_job_events,
                               &impl_->delete_job_steps, &impl_->delete_job}) {
    Query query(*statement);
    query.Bind(*n);
    RETURN_IF_ERROR(query.Run());
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<std::string>> JobStore::JobsEndedBy(int64_t unix_ms,
                                                               int64_t limit) const {
  MutexLock lock(&impl_->mutex);
  std::vector<std::string> jobs;
  Query query(impl_->select_ended_before);
  query.Bind(unix_ms).Bind(limit < 0 ? int64_t{-1} : limit);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    jobs.push_back(JobIdFor(query.Int(0)));
  }
  return jobs;
}

absl::Status JobStore::Transition(const std::string& job_id, JobState to,
                                  const std::string& message, int64_t now_ms) {
  if (!JobState_IsValid(to) || to == JOB_STATE_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat("to: ", StateName(to), " is not a state a job can be moved to"));
  }
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  Impl::Transaction txn(impl_.get());
  RETURN_IF_ERROR(txn.Begin());
  ASSIGN_OR_RETURN(const JobState from, impl_->LoadState(*n, job_id));
  if (!IsAllowedJobTransition(from, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, ": cannot go from ", StateName(from), " to ", StateName(to),
                     IsTerminalJobState(from) ? " (the job has finished)" : ""));
  }
  // JobStatus.message says why a job failed or was cancelled, or why it went back to
  // waiting; placing, running and success clear it.
  {
    const bool says_why =
        to == JOB_STATE_FAILED || to == JOB_STATE_CANCELLED || to == JOB_STATE_PENDING;
    Query query(impl_->update_state_and_message);
    query.Bind(static_cast<int64_t>(to))
        .Bind(says_why ? absl::string_view(message) : absl::string_view(""))
        .Bind(now_ms);
    if (IsTerminalJobState(to)) {
      query.Bind(now_ms);
    } else {
      query.BindNull();
    }
    query.Bind(*n);
    RETURN_IF_ERROR(query.Run());
  }
  std::string event = absl::StrCat(StateName(from), " -> ", StateName(to));
  if (!message.empty()) absl::StrAppend(&event, ": ", message);
  RETURN_IF_ERROR(impl_->InsertEvent(*n, now_ms, "state", event));
  return txn.Commit();
}

absl::Status JobStore::SetPlacement(const std::string& job_id, int64_t generation, int32_t restarts,
                                    const std::vector<std::string>& workers, int64_t now_ms) {
  if (generation < 0) return absl::InvalidArgumentError("generation: must not be negative");
  if (restarts < 0) return absl::InvalidArgumentError("restarts: must not be negative");
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  Impl::Transaction txn(impl_.get());
  RETURN_IF_ERROR(txn.Begin());
  {
    Query query(impl_->update_placement);
    query.Bind(generation).Bind(static_cast<int64_t>(restarts)).Bind(now_ms).Bind(*n);
    RETURN_IF_ERROR(query.Run());
    if (sqlite3_changes(impl_->db.get()) == 0) return JobNotFound(job_id);
  }
  {
    Query query(impl_->delete_workers);
    query.Bind(*n);
    RETURN_IF_ERROR(query.Run());
  }
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    Query query(impl_->insert_worker);
    query.Bind(*n).Bind(static_cast<int64_t>(rank)).Bind(workers[rank]);
    RETURN_IF_ERROR(query.Run());
  }
  return txn.Commit();
}

absl::Status JobStore::RecordStep(const std::string& job_id, const StepMetrics& metrics,
                                  int64_t now_ms) {
  // A batch of one (RecordSteps has the statements; a database always has impl_, so this
  // does not come back here).
  return RecordSteps({StepRow{job_id, metrics}}, now_ms)[0];
}

std::vector<absl::Status> JobStore::RecordSteps(const std::vector<StepRow>& rows, int64_t now_ms) {
  std::vector<absl::Status> results(rows.size());
  if (impl_ == nullptr) {  // a test double: its own RecordStep, row by row
    for (size_t i = 0; i < rows.size(); ++i) {
      results[i] = RecordStep(rows[i].job_id, rows[i].metrics, now_ms);
    }
    return results;
  }
  std::vector<std::string> bytes(rows.size());
  std::vector<int64_t> ids(rows.size(), -1);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].metrics.SerializeToString(&bytes[i])) {
      results[i] = absl::InvalidArgumentError("metrics: cannot be serialized");
    } else if (const std::optional<int64_t> n = ParseJobId(rows[i].job_id); n.has_value()) {
      ids[i] = *n;
    } else {
      results[i] = JobNotFound(rows[i].job_id);
    }
  }
  MutexLock lock(&impl_->mutex);
  Impl::Transaction txn(impl_.get());
  absl::Status failed = txn.Begin();
  for (size_t i = 0; i < rows.size() && failed.ok(); ++i) {
    if (!results[i].ok()) continue;
    const StepMetrics& metrics = rows[i].metrics;
    Query progress(impl_->update_progress);
    progress.Bind(metrics.step());
    if (metrics.has_loss()) {
      progress.Bind(metrics.loss());
    } else {
      progress.BindNull();
    }
    progress.Bind(metrics.tokens_per_second()).BindBlob(bytes[i]).Bind(now_ms).Bind(ids[i]);
    failed = progress.Run();
    if (!failed.ok()) break;
    if (sqlite3_changes(impl_->db.get()) == 0) {
      results[i] = JobNotFound(rows[i].job_id);
      continue;
    }
    Query step(impl_->upsert_step);
    step.Bind(ids[i]).Bind(metrics.step()).BindBlob(bytes[i]);
    failed = step.Run();
  }
  if (failed.ok()) failed = txn.Commit();
  if (!failed.ok()) {
    for (absl::Status& result : results) {
      if (result.ok()) result = failed;
    }
  }
  return results;
}

absl::StatusOr<std::vector<StepMetrics>> JobStore::Steps(const std::string& job_id,
                                                         int64_t after_step, int64_t limit) const {
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  RETURN_IF_ERROR(impl_->LoadState(*n, job_id).status());
  std::vector<StepMetrics> steps;
  Query query(impl_->select_steps);
  query.Bind(*n).Bind(after_step).Bind(limit < 0 ? int64_t{-1} : limit);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    if (!steps.emplace_back().ParseFromString(query.Bytes(0))) {
      return absl::DataLossError(absl::StrCat(job_id, ": a stored step does not parse"));
    }
  }
  return steps;
}

absl::Status JobStore::AppendEvent(const std::string& job_id, const std::string& kind,
                                   const std::string& message, int64_t now_ms) {
  if (kind.empty()) return absl::InvalidArgumentError("kind: must not be empty");
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  Impl::Transaction txn(impl_.get());
  RETURN_IF_ERROR(txn.Begin());
  RETURN_IF_ERROR(impl_->LoadState(*n, job_id).status());
  RETURN_IF_ERROR(impl_->InsertEvent(*n, now_ms, kind, message));
  return txn.Commit();
}

absl::StatusOr<JobEventPage> JobStore::Events(const std::string& job_id, int64_t after_event,
                                              int64_t max_events, int64_t max_bytes) const {
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  RETURN_IF_ERROR(impl_->LoadState(*n, job_id).status());
  JobEventPage page;
  Query query(impl_->select_event_page);
  // One row beyond the page says whether there are more.
  query.Bind(*n).Bind(after_event).Bind(max_events < 0 ? int64_t{-1} : max_events + 1);
  int64_t bytes = 0;
  int64_t last = 0;
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    if (max_events >= 0 && static_cast<int64_t>(page.events.size()) >= max_events) {
      page.next_after_event = last;
      break;
    }
    JobEvent event;
    event.set_unix_ms(query.Int(1));
    event.set_kind(query.Bytes(2));
    event.set_message(query.Bytes(3));
    if (max_bytes >= 0) {
      const int64_t size = static_cast<int64_t>(event.ByteSizeLong()) + 8;
      if (!page.events.empty() && bytes + size > max_bytes) {
        page.next_after_event = last;
        break;
      }
      bytes += size;
    }
    page.events.push_back(std::move(event));
    last = query.Int(0);
  }
  return page;
}

absl::StatusOr<std::vector<JobEvent>> JobStore::Events(const std::string& job_id) const {
  const std::optional<int64_t> n = ParseJobId(job_id);
  if (!n) return JobNotFound(job_id);
  MutexLock lock(&impl_->mutex);
  RETURN_IF_ERROR(impl_->LoadState(*n, job_id).status());
  std::vector<JobEvent> events;
  Query query(impl_->select_events);
  query.Bind(*n);
  while (true) {
    ASSIGN_OR_RETURN(const bool row, query.Step());
    if (!row) break;
    JobEvent event;
    event.set_unix_ms(query.Int(0));
    event.set_kind(query.Bytes(1));
    event.set_message(query.Bytes(2));
    events.push_back(std::move(event));
  }
  return events;
}

}  // namespace mtrain
