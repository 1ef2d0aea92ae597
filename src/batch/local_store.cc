#include "batch/local_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>

namespace ferry::batch {

namespace {

using json = nlohmann::json;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One prepared statement; reset on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, int64_t v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error.
  int Step() { return rc_ = sqlite3_step(s_); }
  std::string Text(int col) const {
    const auto* p = static_cast<const char*>(sqlite3_column_blob(s_, col));
    return p == nullptr ? std::string() : std::string(p, sqlite3_column_bytes(s_, col));
  }
  int64_t Int(int col) const { return sqlite3_column_int64(s_, col); }
  Status Error(const char* what) const {
    return Unavailable(std::string("batch store: ") + what + ": " + sqlite3_errmsg(db_));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS files(id TEXT PRIMARY KEY, tenant TEXT NOT NULL, filename TEXT, purpose TEXT,
  bytes INTEGER, created_at INTEGER, content BLOB, expires_at INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS files_by_tenant ON files(tenant, created_at);
CREATE TABLE IF NOT EXISTS batches(id TEXT PRIMARY KEY, tenant TEXT NOT NULL, created_at INTEGER,
  seq INTEGER, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS batches_by_tenant ON batches(tenant, seq);
CREATE TABLE IF NOT EXISTS entries(batch_id TEXT NOT NULL, idx INTEGER NOT NULL, state INTEGER NOT NULL,
  lease_until INTEGER, entry TEXT NOT NULL, outcome INTEGER, line TEXT, attempts INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY(batch_id, idx));
CREATE INDEX IF NOT EXISTS entries_by_state ON entries(state, lease_until);
CREATE TABLE IF NOT EXISTS validating(batch_id TEXT PRIMARY KEY);
)sql";

enum EntryState { kQueued = 0, kLeased = 1, kDone = 2 };

class LocalStore final : public Store {
 public:
  LocalStore(QueueOptions options, sqlite3* db, int lock_fd) : options_(std::move(options)), db_(db), lock_fd_(lock_fd) {}
  ~LocalStore() override {
    sqlite3_close(rdb_);
    sqlite3_close(db_);
    if (lock_fd_ >= 0) close(lock_fd_);
  }
  std::string backend() const override { return "local"; }

  Status Init() {
    char* err = nullptr;
    const std::string pragmas = "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA busy_timeout=5000;";
    if (sqlite3_exec(db_, (pragmas + kSchema).c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      Status s = Unavailable(std::string("batch store: cannot set up the database: ") + (err ? err : "?"));
      sqlite3_free(err);
      return s;
    }
    // A data directory made before requests counted their attempts gets the column (an
    // error here only means it is there already).
    sqlite3_exec(db_, "ALTER TABLE entries ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0", nullptr, nullptr, nullptr);
    // ... and files their expiry (0: kept until deleted).
    sqlite3_exec(db_, "ALTER TABLE files ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0", nullptr, nullptr, nullptr);
    FERRY_RETURN_IF_ERROR(Exec("CREATE INDEX IF NOT EXISTS files_by_expiry ON files(expires_at) WHERE expires_at>0"));
    // The previous server's leases died with it: their entries run again (their results,
    // where written, are kept and not written twice).
    FERRY_RETURN_IF_ERROR(Exec("UPDATE entries SET state=0 WHERE state=1"));
    // Reads (the API's GETs, the metrics) on a second connection: in WAL mode they see the
    // last commit and never wait for a writer's fsync.
    const char* path = sqlite3_db_filename(db_, "main");
    if (sqlite3_open_v2(path, &rdb_, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, nullptr) != SQLITE_OK) {
      return Unavailable(std::string("batch store: cannot open a reader: ") + (rdb_ ? sqlite3_errmsg(rdb_) : "?"));
    }
    sqlite3_busy_timeout(rdb_, 5000);
    return Status::Ok();
  }

  Status PutFile(const FileInfo& f, const std::string& content) override {
    std::lock_guard<std::mutex> lock(mu_);
    return InsertFile(f, content);
  }

  Result<FileInfo> GetFile(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    Stmt s(rdb_, "SELECT id, tenant, filename, purpose, bytes, created_at, expires_at FROM files WHERE id=? AND tenant=? "
                 "AND (expires_at=0 OR expires_at>?)");
    s.Bind(1, id).Bind(2, tenant).Bind(3, NowUnix());
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return NotFound("no file with id '" + id + "'");
    if (rc != SQLITE_ROW) return s.Error("reading a file");
    return FileRow(s);
  }

  Result<std::string> FileContent(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    Stmt s(rdb_, "SELECT content FROM files WHERE id=? AND tenant=? AND (expires_at=0 OR expires_at>?)");
    s.Bind(1, id).Bind(2, tenant).Bind(3, NowUnix());
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return NotFound("no file with id '" + id + "'");
    if (rc != SQLITE_ROW) return s.Error("reading a file");
    return s.Text(0);
  }

  Result<std::vector<FileInfo>> ListFiles(const std::string& tenant, const std::string& purpose,
                                          const Page& page) override {
    std::lock_guard<std::mutex> lock(rmu_);
    int64_t after_rowid = INT64_MAX;
    if (!page.after.empty()) {
      Stmt a(rdb_, "SELECT rowid FROM files WHERE id=? AND tenant=?");
      a.Bind(1, page.after).Bind(2, tenant);
      if (a.Step() == SQLITE_ROW) after_rowid = a.Int(0);
    }
    Stmt s(rdb_,
           "SELECT id, tenant, filename, purpose, bytes, created_at, expires_at FROM files WHERE tenant=? AND rowid<? AND "
           "(?='' OR purpose=?) AND (expires_at=0 OR expires_at>?) ORDER BY rowid DESC LIMIT ?");
    s.Bind(1, tenant).Bind(2, after_rowid).Bind(3, purpose).Bind(4, purpose).Bind(5, NowUnix());
    s.Bind(6, int64_t{page.limit} + 1);
    std::vector<FileInfo> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out.push_back(FileRow(s));
    if (rc != SQLITE_DONE) return s.Error("listing files");
    return out;
  }

  Status DeleteFile(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s(db_, "DELETE FROM files WHERE id=? AND tenant=? AND (expires_at=0 OR expires_at>?)");
    s.Bind(1, id).Bind(2, tenant).Bind(3, NowUnix());
    if (s.Step() != SQLITE_DONE) return s.Error("deleting a file");
    if (sqlite3_changes(db_) == 0) return NotFound("no file with id '" + id + "'");
    return Status::Ok();
  }

  Result<int64_t> SweepExpiredFiles(int64_t now) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s(db_, "DELETE FROM files WHERE expires_at>0 AND expires_at<=?");
    s.Bind(1, now);
    if (s.Step() != SQLITE_DONE) return s.Error("deleting expired files");
    return static_cast<int64_t>(sqlite3_changes(db_));
  }

  Status CreateBatch(const BatchInfo& b, const std::vector<Entry>& entries) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      Stmt s(db_, "INSERT INTO batches(id, tenant, created_at, seq, record) VALUES(?,?,?,(SELECT IFNULL(MAX(seq),0)+1 FROM batches),?)");
      s.Bind(1, b.id).Bind(2, b.tenant).Bind(3, b.created_at).Bind(4, b.ToRecord().dump());
      if (s.Step() != SQLITE_DONE) return s.Error("storing a batch");
      if (b.status == kValidating) {
        Stmt v(db_, "INSERT INTO validating(batch_id) VALUES(?)");
        v.Bind(1, b.id);
        if (v.Step() != SQLITE_DONE) return v.Error("storing a batch");
      }
      return QueueEntries(b.id, entries);
    }();
    return Commit(st);
  }

  Result<std::vector<BatchInfo>> LeaseValidation(const std::string& /*consumer*/, int max) override {
    std::lock_guard<std::mutex> lock(mu_);  // one server: the writer's lock is the claim
    std::vector<BatchInfo> out;
    Stmt s(db_, "SELECT b.record FROM validating v JOIN batches b ON b.id=v.batch_id ORDER BY b.seq LIMIT ?");
    s.Bind(1, int64_t{max});
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out.push_back(BatchInfo::FromRecord(json::parse(s.Text(0))));
    if (rc != SQLITE_DONE) return s.Error("listing batches to validate");
    return out;
  }

  Status FinishValidation(const std::string& id, const std::vector<Entry>& entries, const json& errors) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      Stmt d(db_, "DELETE FROM validating WHERE batch_id=?");
      d.Bind(1, id);
      if (d.Step() != SQLITE_DONE) return d.Error("finishing a validation");
      FERRY_ASSIGN_OR_RETURN(BatchInfo b, LoadBatch("", id));
      if (b.status != kValidating) return Status::Ok();  // cancelled meanwhile
      const int64_t now = NowUnix();
      if (!errors.is_null()) {
        b.errors = errors;
        SetStatus(b, kFailed, now);
        return SaveBatch(b);
      }
      b.total = static_cast<int64_t>(entries.size());
      SetStatus(b, kInProgress, now);
      FERRY_RETURN_IF_ERROR(QueueEntries(id, entries));
      return SaveBatch(b);
    }();
    return Commit(st);
  }

  Result<BatchInfo> GetBatch(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(rmu_);
    return LoadBatch(tenant, id, rdb_);
  }

  Result<std::vector<BatchInfo>> ListBatches(const std::string& tenant, const Page& page) override {
    std::lock_guard<std::mutex> lock(rmu_);
    int64_t after_seq = INT64_MAX;
    if (!page.after.empty()) {
      Stmt a(rdb_, "SELECT seq FROM batches WHERE id=? AND (?='' OR tenant=?)");
      a.Bind(1, page.after).Bind(2, tenant).Bind(3, tenant);
      if (a.Step() == SQLITE_ROW) after_seq = a.Int(0);
    }
    Stmt s(rdb_, "SELECT record FROM batches WHERE (?='' OR tenant=?) AND seq<? ORDER BY seq DESC LIMIT ?");
    s.Bind(1, tenant).Bind(2, tenant).Bind(3, after_seq).Bind(4, int64_t{page.limit} + 1);
    std::vector<BatchInfo> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out.push_back(BatchInfo::FromRecord(json::parse(s.Text(0))));
    if (rc != SQLITE_DONE) return s.Error("listing batches");
    return out;
  }

  Result<BatchInfo> CancelBatch(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(BatchInfo b, LoadBatch(tenant, id));
    if (b.status == kCancelling || b.status == kCancelled) return b;
    if (b.status == kValidating) {
      // Nothing queued yet: cancelled at once (FinishValidation then leaves it).
      FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
      Status st = [&]() -> Status {
        const int64_t now = NowUnix();
        SetStatus(b, kCancelling, now);
        SetStatus(b, kCancelled, now);
        Stmt d(db_, "DELETE FROM validating WHERE batch_id=?");
        d.Bind(1, id);
        if (d.Step() != SQLITE_DONE) return d.Error("cancelling a batch");
        return SaveBatch(b);
      }();
      FERRY_RETURN_IF_ERROR(Commit(st));
      return LoadBatch(tenant, id);
    }
    if (b.status != kInProgress) {
      return FailedPrecondition("batch '" + id + "' is " + b.status + "; only a batch in progress can be cancelled");
    }
    FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      SetStatus(b, kCancelling, NowUnix());
      // Requests not yet leased are cancelled now; those running finish and are kept.
      FERRY_RETURN_IF_ERROR(SkipQueued(b, kCancelled));
      return SaveOrFinalize(b);
    }();
    FERRY_RETURN_IF_ERROR(Commit(st));
    return LoadBatch(tenant, id);
  }

  Result<std::vector<Entry>> Lease(const std::string& /*consumer*/, int max) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowMs();
    std::vector<Entry> out;
    {
      Stmt s(db_,
             "SELECT entry, attempts FROM entries WHERE state=0 OR (state=1 AND lease_until<?) ORDER BY state, rowid "
             "LIMIT ?");
      s.Bind(1, now).Bind(2, int64_t{max});
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        Result<Entry> e = Entry::FromRecord(s.Text(0));
        if (!e.ok()) continue;
        e->attempts = static_cast<int>(s.Int(1)) + 1;
        out.push_back(std::move(e).value());
      }
      if (rc != SQLITE_DONE) return s.Error("leasing requests");
    }
    if (out.empty()) return out;
    FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      for (Entry& e : out) {
        Stmt u(db_, "UPDATE entries SET state=1, lease_until=?, attempts=attempts+1 WHERE batch_id=? AND idx=?");
        u.Bind(1, now + options_.lease_ms).Bind(2, e.batch_id).Bind(3, e.index);
        if (u.Step() != SQLITE_DONE) return u.Error("leasing a request");
        Result<BatchInfo> b = LoadBatch("", e.batch_id);
        if (!b.ok()) continue;
        e.tenant = b->tenant;
        if (b->status == kCancelling || b->status == kCancelled) e.skip = kCancelled;
        if (b->expires_at > 0 && NowUnix() >= b->expires_at) e.skip = kExpired;
      }
      return Status::Ok();
    }();
    FERRY_RETURN_IF_ERROR(Commit(st));
    return out;
  }

  Status Renew(const std::string& /*consumer*/, const std::vector<Entry>& running) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      for (const Entry& e : running) {
        Stmt u(db_, "UPDATE entries SET lease_until=? WHERE batch_id=? AND idx=? AND state=1");
        u.Bind(1, NowMs() + options_.lease_ms).Bind(2, e.batch_id).Bind(3, e.index);
        if (u.Step() != SQLITE_DONE) return u.Error("renewing a lease");
      }
      return Status::Ok();
    }();
    return Commit(st);
  }

  Result<bool> Complete(const Entry& e, const EntryResult& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    bool wrote = false;
    Status st = [&]() -> Status {
      Stmt u(db_, "UPDATE entries SET state=2, outcome=?, line=? WHERE batch_id=? AND idx=? AND state<2");
      u.Bind(1, static_cast<int64_t>(r.outcome)).Bind(2, r.line).Bind(3, e.batch_id).Bind(4, e.index);
      if (u.Step() != SQLITE_DONE) return u.Error("recording a result");
      wrote = sqlite3_changes(db_) == 1;
      if (!wrote) return Status::Ok();
      FERRY_ASSIGN_OR_RETURN(BatchInfo b, LoadBatch("", e.batch_id));
      (r.outcome == Outcome::kSucceeded ? b.completed : r.outcome == Outcome::kFailed ? b.failed : b.cancelled) += 1;
      return SaveOrFinalize(b);
    }();
    FERRY_RETURN_IF_ERROR(Commit(st));
    return wrote;
  }

  // Results and finalization commit together; what is left is the expiry of batches past
  // their window: their queued requests are recorded as batch_expired in one transaction
  // each (those running finish and are kept).
  Status Maintain() override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = NowUnix();
    std::vector<BatchInfo> due;
    {
      // Entries exist only for unfinished batches: a short list.
      Stmt s(db_, "SELECT b.record FROM batches b WHERE b.id IN (SELECT DISTINCT batch_id FROM entries WHERE state=0)");
      int rc;
      while ((rc = s.Step()) == SQLITE_ROW) {
        BatchInfo b = BatchInfo::FromRecord(json::parse(s.Text(0)));
        if (b.status == kInProgress && b.expires_at > 0 && now >= b.expires_at) due.push_back(std::move(b));
      }
      if (rc != SQLITE_DONE) return s.Error("looking for expired batches");
    }
    for (BatchInfo& b : due) {
      FERRY_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
      Status st = [&]() -> Status {
        FERRY_RETURN_IF_ERROR(SkipQueued(b, kExpired));
        return SaveOrFinalize(b);
      }();
      FERRY_RETURN_IF_ERROR(Commit(st));
    }
    return Status::Ok();
  }

  Result<QueueCounts> Counts() override {
    std::lock_guard<std::mutex> lock(rmu_);
    QueueCounts c;
    Stmt s(rdb_, "SELECT record FROM batches");
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      const BatchInfo b = BatchInfo::FromRecord(json::parse(s.Text(0)));
      c.jobs[b.status] += 1;
      c.requests_total += b.total;
      c.completed += b.completed;
      c.failed += b.failed;
      c.cancelled += b.cancelled;
    }
    if (rc != SQLITE_DONE) return s.Error("counting batches");
    return c;
  }

 private:
  static FileInfo FileRow(const Stmt& s) {
    return FileInfo{s.Text(0), s.Text(1), s.Text(2), s.Text(3), s.Int(4), s.Int(5), s.Int(6)};
  }

  Status InsertFile(const FileInfo& f, const std::string& content) {
    Stmt s(db_,
           "INSERT INTO files(id, tenant, filename, purpose, bytes, created_at, content, expires_at) "
           "VALUES(?,?,?,?,?,?,?,?)");
    s.Bind(1, f.id).Bind(2, f.tenant).Bind(3, f.filename).Bind(4, f.purpose).Bind(5, f.bytes).Bind(6, f.created_at);
    s.BindBlob(7, content).Bind(8, f.expires_at);
    if (s.Step() != SQLITE_DONE) return s.Error("storing a file");
    return Status::Ok();
  }

  // Inside a transaction.
  Status QueueEntries(const std::string& batch_id, const std::vector<Entry>& entries) {
    for (const Entry& e : entries) {
      Stmt q(db_, "INSERT INTO entries(batch_id, idx, state, lease_until, entry) VALUES(?,?,0,0,?)");
      q.Bind(1, batch_id).Bind(2, e.index).Bind(3, e.ToRecord().dump());
      if (q.Step() != SQLITE_DONE) return q.Error("queueing a request");
    }
    return Status::Ok();
  }

  // Inside a transaction: the batch's requests not yet leased get their batch_cancelled or
  // batch_expired line now, counted in b.cancelled.
  Status SkipQueued(BatchInfo& b, const char* why) {
    std::vector<Entry> queued;
    {
      Stmt s(db_, "SELECT entry FROM entries WHERE batch_id=? AND state=0");
      s.Bind(1, b.id);
      while (s.Step() == SQLITE_ROW) {
        Result<Entry> e = Entry::FromRecord(s.Text(0));
        if (e.ok()) queued.push_back(std::move(e).value());
      }
    }
    for (const Entry& e : queued) {
      Stmt u(db_, "UPDATE entries SET state=2, outcome=?, line=? WHERE batch_id=? AND idx=? AND state=0");
      u.Bind(1, static_cast<int64_t>(Outcome::kCancelled)).Bind(2, SkippedLine(e, why)).Bind(3, b.id).Bind(4, e.index);
      if (u.Step() != SQLITE_DONE) return u.Error("skipping a request");
      b.cancelled += sqlite3_changes(db_);
    }
    return Status::Ok();
  }

  Status Exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
      Status s = Unavailable(std::string("batch store: ") + (err ? err : sqlite3_errmsg(db_)));
      sqlite3_free(err);
      return s;
    }
    return Status::Ok();
  }

  Status Commit(const Status& st) {
    if (!st.ok()) {
      (void)Exec("ROLLBACK");
      return st;
    }
    return Exec("COMMIT");
  }

  Result<BatchInfo> LoadBatch(const std::string& tenant, const std::string& id, sqlite3* db = nullptr) {
    Stmt s(db != nullptr ? db : db_, "SELECT record FROM batches WHERE id=? AND (?='' OR tenant=?)");
    s.Bind(1, id).Bind(2, tenant).Bind(3, tenant);
    const int rc = s.Step();
    if (rc == SQLITE_DONE) return NotFound("no batch with id '" + id + "'");
    if (rc != SQLITE_ROW) return s.Error("reading a batch");
    return BatchInfo::FromRecord(json::parse(s.Text(0)));
  }

  Status SaveBatch(const BatchInfo& b) {
    Stmt s(db_, "UPDATE batches SET record=? WHERE id=?");
    s.Bind(1, b.ToRecord().dump()).Bind(2, b.id);
    if (s.Step() != SQLITE_DONE) return s.Error("updating a batch");
    return Status::Ok();
  }

  // Inside a transaction: the batch's record, and when every entry has its result the
  // output and error files and the final status.
  Status SaveOrFinalize(BatchInfo& b) {
    if (b.completed + b.failed + b.cancelled < b.total) return SaveBatch(b);
    const int64_t now = NowUnix();
    std::vector<std::pair<int64_t, EntryResult>> results;
    {
      Stmt s(db_, "SELECT idx, outcome, line FROM entries WHERE batch_id=? AND state=2");
      s.Bind(1, b.id);
      while (s.Step() == SQLITE_ROW) {
        results.push_back({s.Int(0), EntryResult{static_cast<Outcome>(s.Int(1)), s.Text(2)}});
      }
    }
    const BatchOutputs outs = AssembleOutputs(results);
    b.finalizing_at = now;
    auto put = [&](const std::string& content, const char* suffix, std::string& id_out) -> Status {
      if (content.empty()) return Status::Ok();
      FileInfo f{NewId("file-"), b.tenant, b.id + suffix, "batch_output", static_cast<int64_t>(content.size()), now,
                 b.output_expires_after_s > 0 ? now + b.output_expires_after_s : 0};
      FERRY_RETURN_IF_ERROR(InsertFile(f, content));
      id_out = f.id;
      return Status::Ok();
    };
    FERRY_RETURN_IF_ERROR(put(outs.output, "_output.jsonl", b.output_file_id));
    FERRY_RETURN_IF_ERROR(put(outs.errors, "_error.jsonl", b.error_file_id));
    SetStatus(b, FinalStatus(b, now), now);
    FERRY_RETURN_IF_ERROR(SaveBatch(b));
    // The queue rows are no longer needed: the files hold the results.
    Stmt d(db_, "DELETE FROM entries WHERE batch_id=?");
    d.Bind(1, b.id);
    if (d.Step() != SQLITE_DONE) return d.Error("releasing a finished batch");
    return Status::Ok();
  }

  const QueueOptions options_;
  std::mutex mu_;   // the writer connection
  std::mutex rmu_;  // the reader connection
  sqlite3* db_;
  sqlite3* rdb_ = nullptr;
  int lock_fd_;
};

}  // namespace

Result<std::unique_ptr<Store>> OpenLocalStore(const QueueOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) return InvalidArgument("queue.path: cannot create " + options.path + ": " + ec.message());
  const std::string lock_path = options.path + "/LOCK";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return InvalidArgument("queue.path: cannot open " + lock_path);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return FailedPrecondition("queue.path: " + options.path +
                              " is in use by another server (the local queue serves one server; use backend redis "
                              "for several)");
  }
  sqlite3* db = nullptr;
  const std::string db_path = options.path + "/batches.sqlite3";
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    close(fd);
    return InvalidArgument("queue.path: cannot open " + db_path + ": " + msg);
  }
  auto store = std::make_unique<LocalStore>(options, db, fd);
  FERRY_RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace ferry::batch
