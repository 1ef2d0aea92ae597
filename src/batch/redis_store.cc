#include "batch/redis_store.h"

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "batch/resp.h"
#include "core/logging.h"

namespace ferry::batch {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Records a result once and counts it. KEYS: results hash, batch hash, finalizing set.
// ARGV: custom_id, value, count field, batch id. Returns -1 (already there or the batch is
// finished), 0 (recorded), 1 (recorded, the last one).
constexpr const char* kCompleteScript = R"lua(
local st = redis.call('HGET', KEYS[2], 'status')
if st == false or st == 'completed' or st == 'cancelled' or st == 'expired' or st == 'failed' then return -1 end
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return -1 end
redis.call('HINCRBY', KEYS[2], ARGV[3], 1)
local c = redis.call('HMGET', KEYS[2], 'completed', 'failed', 'cancelled', 'total')
local done = tonumber(c[1] or 0) + tonumber(c[2] or 0) + tonumber(c[3] or 0)
if done >= tonumber(c[4]) then
  redis.call('HSET', KEYS[2], 'status_before_final', st)
  redis.call('SADD', KEYS[3], ARGV[4])
  return 1
end
return 0
)lua";

// in_progress → cancelling; validating → cancelled (nothing was queued yet). KEYS: batch
// hash, validating set. ARGV: now, batch id. Returns the status before.
constexpr const char* kCancelScript = R"lua(
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'in_progress' then redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1]) end
if st == 'validating' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'cancelling_at', ARGV[1], 'cancelled_at', ARGV[1])
  redis.call('SREM', KEYS[2], ARGV[2])
end
return st
)lua";

const char* kStatusFields[] = {"status",       "output_file_id", "error_file_id", "finalizing_at", "completed_at",
                               "failed_at",    "expired_at",     "cancelling_at", "cancelled_at",  "completed",
                               "failed",       "cancelled",      "total"};

std::string OutcomeField(Outcome o) {
  return o == Outcome::kSucceeded ? "completed" : o == Outcome::kFailed ? "failed" : "cancelled";
}

class RedisStore final : public Store {
 public:
  RedisStore(QueueOptions options, RedisAddress address)
      : options_(std::move(options)), address_(std::move(address)), p_(options_.key_prefix + ":") {}
  std::string backend() const override { return "redis"; }

  Status Init() {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"XGROUP", "CREATE", p_ + "queue", p_ + "workers", "0", "MKSTREAM"}));
    if (r.is_error() && r.str.rfind("BUSYGROUP", 0) != 0) return Unavailable("redis: XGROUP CREATE: " + r.str);
    return Status::Ok();
  }

  Status PutFile(const FileInfo& f, const std::string& content) override {
    std::lock_guard<std::mutex> lock(mu_);
    return PutFileLocked(f, content);
  }

  Result<FileInfo> GetFile(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"HMGET", p_ + "file:" + id, "tenant", "filename", "purpose", "bytes",
                                               "created_at", "expires_at"}));
    if (r.type != RedisReply::Type::kArray || r.elements.size() != 6 || r.elements[0].is_nil() ||
        r.elements[0].str != tenant) {
      return NotFound("no file with id '" + id + "'");
    }
    FileInfo f{id, tenant, r.elements[1].str, r.elements[2].str, ToInt(r.elements[3]), ToInt(r.elements[4]),
               ToInt(r.elements[5])};
    if (f.Expired(NowUnix())) return NotFound("no file with id '" + id + "'");  // the sweeper deletes it
    return f;
  }

  Result<std::string> FileContent(const std::string& tenant, const std::string& id) override {
    FERRY_RETURN_IF_ERROR(GetFile(tenant, id).status());
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"GET", p_ + "file:" + id + ":content"}));
    if (r.is_nil()) return NotFound("no file with id '" + id + "'");
    return r.str;
  }

  Result<std::vector<FileInfo>> ListFiles(const std::string& tenant, const std::string& purpose,
                                          const Page& page) override {
    std::vector<std::string> ids;
    {
      std::lock_guard<std::mutex> lock(mu_);
      FERRY_ASSIGN_OR_RETURN(ids, PageIds(p_ + "files:" + tenant, page.after, purpose.empty() ? page.limit + 1 : 10000));
    }
    std::vector<FileInfo> out;
    for (const std::string& id : ids) {
      Result<FileInfo> f = GetFile(tenant, id);
      if (!f.ok()) continue;
      if (!purpose.empty() && f->purpose != purpose) continue;
      out.push_back(std::move(f).value());
      if (static_cast<int>(out.size()) > page.limit) break;
    }
    return out;
  }

  Status DeleteFile(const std::string& tenant, const std::string& id) override {
    FERRY_RETURN_IF_ERROR(GetFile(tenant, id).status());
    std::lock_guard<std::mutex> lock(mu_);
    return RemoveFileLocked(tenant, id);
  }

  Result<int64_t> SweepExpiredFiles(int64_t now) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(RedisReply due, Call({"ZRANGEBYSCORE", p_ + "file_expiry", "-inf", std::to_string(now),
                                                 "LIMIT", "0", "1000"}));
    if (due.is_error()) return Unavailable("redis: ZRANGEBYSCORE: " + due.str);
    int64_t n = 0;
    for (const RedisReply& id : due.elements) {
      FERRY_ASSIGN_OR_RETURN(RedisReply tenant, Call({"HGET", p_ + "file:" + id.str, "tenant"}));
      FERRY_RETURN_IF_ERROR(RemoveFileLocked(tenant.is_nil() ? "" : tenant.str, id.str));
      n += tenant.is_nil() ? 0 : 1;  // nil: another replica swept it first
    }
    return n;
  }

  Status CreateBatch(const BatchInfo& b, const std::vector<Entry>& entries) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = p_ + "batch:" + b.id;
    FERRY_RETURN_IF_ERROR(Call({"HSET", key, "record", b.ToRecord().dump(), "tenant", b.tenant, "status", b.status,
                                "expires_at", std::to_string(b.expires_at), "total", std::to_string(b.total),
                                "completed", "0", "failed", "0", "cancelled", "0", "failed_at",
                                std::to_string(b.failed_at)})
                              .status());
    if (b.status == kValidating) FERRY_RETURN_IF_ERROR(Call({"SADD", p_ + "validating", b.id}).status());
    for (const Entry& e : entries) {
      FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"XADD", p_ + "queue", "*", "e", e.ToRecord().dump()}));
      if (r.is_error()) return Unavailable("redis: XADD: " + r.str);
    }
    FERRY_ASSIGN_OR_RETURN(RedisReply seq, Call({"INCR", p_ + "seq"}));
    const std::string score = std::to_string(seq.integer);
    FERRY_RETURN_IF_ERROR(Call({"ZADD", p_ + "batches:" + b.tenant, score, b.id}).status());
    return Call({"ZADD", p_ + "batches:all", score, b.id}).status();
  }

  Result<std::vector<BatchInfo>> LeaseValidation(const std::string& consumer, int max) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(RedisReply ids, Call({"SMEMBERS", p_ + "validating"}));
    std::vector<BatchInfo> out;
    for (const RedisReply& id : ids.elements) {
      if (static_cast<int>(out.size()) >= max) break;
      Result<BatchInfo> b = LoadBatch("", id.str);
      if (!b.ok() || b->status != kValidating) {
        if (b.ok() || b.status().code() == StatusCode::kNotFound) (void)Call({"SREM", p_ + "validating", id.str});
        continue;
      }
      FERRY_ASSIGN_OR_RETURN(RedisReply got, Call({"SET", p_ + "batch:" + id.str + ":validate_lock", consumer, "NX", "PX",
                                                   std::to_string(options_.lease_ms)}));
      if (got.is_nil()) continue;  // another replica is at it
      out.push_back(std::move(b).value());
    }
    return out;
  }

  Status FinishValidation(const std::string& id, const std::vector<Entry>& entries, const json& errors) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string key = p_ + "batch:" + id;
    // The status change and the queued entries in one MULTI, applied only if nothing touched
    // the batch since it was read (a cancel): all of it or none, whatever dies halfway.
    FERRY_RETURN_IF_ERROR(Call({"WATCH", key}).status());
    const uint64_t watched_on = connects_;  // a reconnect drops the WATCH: then nothing is applied
    Result<BatchInfo> loaded = LoadBatch("", id);
    if (!loaded.ok() || loaded->status != kValidating) {
      (void)Call({"UNWATCH"});
      (void)Call({"SREM", p_ + "validating", id});
      return loaded.ok() || loaded.status().code() == StatusCode::kNotFound ? Status::Ok() : loaded.status();
    }
    BatchInfo b = std::move(loaded).value();
    const int64_t now = NowUnix();
    std::vector<std::vector<std::string>> tx;
    if (!errors.is_null()) {
      b.errors = errors;
      SetStatus(b, kFailed, now);
      tx.push_back({"HSET", key, "record", b.ToRecord().dump(), "status", kFailed, "failed_at", std::to_string(now)});
    } else {
      b.total = static_cast<int64_t>(entries.size());
      SetStatus(b, kInProgress, now);
      for (const Entry& e : entries) tx.push_back({"XADD", p_ + "queue", "*", "e", e.ToRecord().dump()});
      tx.push_back({"HSET", key, "record", b.ToRecord().dump(), "status", kInProgress, "total", std::to_string(b.total)});
    }
    tx.push_back({"SREM", p_ + "validating", id});
    if (connects_ != watched_on || !conn_.connected()) return Unavailable("redis: reconnected while validating " + id);
    FERRY_ASSIGN_OR_RETURN(RedisReply exec, Transaction(tx));
    (void)Call({"DEL", key + ":validate_lock"});
    if (exec.is_error()) return Unavailable("redis: finishing a validation: " + exec.str);
    return Status::Ok();  // nil: the batch changed (cancelled) and is left as it is
  }

  Result<BatchInfo> GetBatch(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return LoadBatch(tenant, id);
  }

  Result<std::vector<BatchInfo>> ListBatches(const std::string& tenant, const Page& page) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(std::vector<std::string> ids,
                           PageIds(p_ + "batches:" + (tenant.empty() ? "all" : tenant), page.after, page.limit + 1));
    std::vector<BatchInfo> out;
    for (const std::string& id : ids) {
      Result<BatchInfo> b = LoadBatch(tenant, id);
      if (b.ok()) out.push_back(std::move(b).value());
    }
    return out;
  }

  Result<BatchInfo> CancelBatch(const std::string& tenant, const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(BatchInfo b, LoadBatch(tenant, id));
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"EVAL", kCancelScript, "2", p_ + "batch:" + id, p_ + "validating",
                                               std::to_string(NowUnix()), id}));
    if (r.is_error()) return Unavailable("redis: cancel: " + r.str);
    if (r.str != kInProgress && r.str != kCancelling && r.str != kCancelled && r.str != kValidating) {
      return FailedPrecondition("batch '" + id + "' is " + r.str + "; only a batch in progress can be cancelled");
    }
    return LoadBatch(tenant, id);
  }

  Result<std::vector<Entry>> Lease(const std::string& consumer, int max) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, std::string>> got;  // stream id, entry record
    // Entries whose consumer stopped renewing them first.
    FERRY_ASSIGN_OR_RETURN(RedisReply claimed,
                           Call({"XAUTOCLAIM", p_ + "queue", p_ + "workers", consumer, std::to_string(options_.lease_ms),
                                 claim_cursor_, "COUNT", std::to_string(max)}));
    if (claimed.is_error()) return Unavailable("redis: XAUTOCLAIM: " + claimed.str);
    if (claimed.elements.size() >= 2) {
      claim_cursor_ = claimed.elements[0].str.empty() ? "0-0" : claimed.elements[0].str;
      CollectEntries(claimed.elements[1], got);
    }
    const size_t reclaimed = got.size();  // delivered before: their delivery counts are in XPENDING
    if (static_cast<int>(got.size()) < max) {
      FERRY_ASSIGN_OR_RETURN(RedisReply fresh,
                             Call({"XREADGROUP", "GROUP", p_ + "workers", consumer, "COUNT",
                                   std::to_string(max - static_cast<int>(got.size())), "STREAMS", p_ + "queue", ">"}));
      if (fresh.is_error()) {
        if (fresh.str.rfind("NOGROUP", 0) == 0) {  // the server lost its data (no AOF): make the group again
          (void)Call({"XGROUP", "CREATE", p_ + "queue", p_ + "workers", "0", "MKSTREAM"});
        }
        return Unavailable("redis: XREADGROUP: " + fresh.str);
      }
      if (fresh.type == RedisReply::Type::kArray) {
        for (const RedisReply& stream : fresh.elements) {
          if (stream.elements.size() == 2) CollectEntries(stream.elements[1], got);
        }
      }
    }
    std::vector<Entry> out;
    const int64_t now = NowUnix();
    for (size_t i = 0; i < got.size(); ++i) {
      const std::string& sid = got[i].first;
      Result<Entry> e = Entry::FromRecord(got[i].second);
      if (!e.ok()) {
        FERRY_LOG_ERROR("batch queue: dropping entry {}: {}", sid, e.status().message());
        (void)Ack(sid);
        continue;
      }
      FERRY_ASSIGN_OR_RETURN(RedisReply meta, Call({"HMGET", p_ + "batch:" + e->batch_id, "tenant", "status", "expires_at"}));
      if (meta.elements.size() != 3 || meta.elements[0].is_nil() || IsTerminal(meta.elements[1].str)) {
        (void)Ack(sid);  // the batch is gone or finished: nothing to run
        continue;
      }
      e->lease = sid;
      if (i < reclaimed) {
        // [[id, consumer, idle ms, times delivered]]; XAUTOCLAIM counted this delivery.
        FERRY_ASSIGN_OR_RETURN(RedisReply pending, Call({"XPENDING", p_ + "queue", p_ + "workers", sid, sid, "1"}));
        if (pending.elements.size() == 1 && pending.elements[0].elements.size() == 4) {
          e->attempts = static_cast<int>(std::max<int64_t>(1, ToInt(pending.elements[0].elements[3])));
        }
      }
      e->tenant = meta.elements[0].str;
      if (meta.elements[1].str == kCancelling) e->skip = kCancelled;
      const int64_t expires = ToInt(meta.elements[2]);
      if (expires > 0 && now >= expires) e->skip = kExpired;
      out.push_back(std::move(e).value());
    }
    return out;
  }

  Status Renew(const std::string& consumer, const std::vector<Entry>& running) override {
    if (running.empty()) return Status::Ok();
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> args = {"XCLAIM", p_ + "queue", p_ + "workers", consumer, "0"};
    for (const Entry& e : running) args.push_back(e.lease);
    args.push_back("JUSTID");
    return Call(args).status();
  }

  Result<bool> Complete(const Entry& e, const EntryResult& r) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string value = std::to_string(e.index) + "\t" + std::to_string(static_cast<int>(r.outcome)) + "\t" + r.line;
    FERRY_ASSIGN_OR_RETURN(RedisReply rep,
                           Call({"EVAL", kCompleteScript, "3", p_ + "batch:" + e.batch_id + ":results",
                                 p_ + "batch:" + e.batch_id, p_ + "finalizing", e.custom_id, value,
                                 OutcomeField(r.outcome), e.batch_id}));
    if (rep.is_error()) return Unavailable("redis: recording a result: " + rep.str);
    if (!e.lease.empty()) FERRY_RETURN_IF_ERROR(Ack(e.lease));
    if (rep.integer == 1) (void)Finalize(e.batch_id);
    return rep.integer >= 0;
  }

  Status Maintain() override {
    std::lock_guard<std::mutex> lock(mu_);
    FERRY_ASSIGN_OR_RETURN(RedisReply due, Call({"SMEMBERS", p_ + "finalizing"}));
    for (const RedisReply& id : due.elements) FERRY_RETURN_IF_ERROR(Finalize(id.str));
    return Status::Ok();
  }

  Result<QueueCounts> Counts() override {
    std::lock_guard<std::mutex> lock(mu_);
    QueueCounts c;
    FERRY_ASSIGN_OR_RETURN(RedisReply ids, Call({"ZRANGE", p_ + "batches:all", "0", "-1"}));
    for (const RedisReply& id : ids.elements) {
      FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"HMGET", p_ + "batch:" + id.str, "status", "total", "completed",
                                                 "failed", "cancelled"}));
      if (r.elements.size() != 5 || r.elements[0].is_nil()) continue;
      c.jobs[r.elements[0].str] += 1;
      c.requests_total += ToInt(r.elements[1]);
      c.completed += ToInt(r.elements[2]);
      c.failed += ToInt(r.elements[3]);
      c.cancelled += ToInt(r.elements[4]);
    }
    return c;
  }

 private:
  static int64_t ToInt(const RedisReply& r) {
    if (r.type == RedisReply::Type::kInteger) return r.integer;
    try {
      return r.str.empty() ? 0 : std::stoll(r.str);
    } catch (...) {
      return 0;
    }
  }

  static void CollectEntries(const RedisReply& list, std::vector<std::pair<std::string, std::string>>& out) {
    for (const RedisReply& item : list.elements) {
      if (item.elements.size() != 2) continue;  // a deleted entry (nil fields)
      const RedisReply& fields = item.elements[1];
      for (size_t i = 0; i + 1 < fields.elements.size(); i += 2) {
        if (fields.elements[i].str == "e") out.emplace_back(item.elements[0].str, fields.elements[i + 1].str);
      }
    }
  }

  Status Ack(const std::string& sid) {
    FERRY_RETURN_IF_ERROR(Call({"XACK", p_ + "queue", p_ + "workers", sid}).status());
    return Call({"XDEL", p_ + "queue", sid}).status();
  }

  // Ids from a sorted set, newest first, after `after` (exclusive).
  Result<std::vector<std::string>> PageIds(const std::string& key, const std::string& after, int count) {
    std::string max = "+inf";
    if (!after.empty()) {
      FERRY_ASSIGN_OR_RETURN(RedisReply s, Call({"ZSCORE", key, after}));
      if (!s.is_nil()) max = "(" + s.str;
    }
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Call({"ZREVRANGEBYSCORE", key, max, "-inf", "LIMIT", "0", std::to_string(count)}));
    std::vector<std::string> ids;
    for (const RedisReply& e : r.elements) ids.push_back(e.str);
    return ids;
  }

  Status PutFileLocked(const FileInfo& f, const std::string& content) {
    FERRY_RETURN_IF_ERROR(Call({"SET", p_ + "file:" + f.id + ":content", content}).status());
    FERRY_RETURN_IF_ERROR(Call({"HSET", p_ + "file:" + f.id, "tenant", f.tenant, "filename", f.filename, "purpose",
                                f.purpose, "bytes", std::to_string(f.bytes), "created_at", std::to_string(f.created_at),
                                "expires_at", std::to_string(f.expires_at)})
                              .status());
    if (f.expires_at > 0) {
      FERRY_RETURN_IF_ERROR(Call({"ZADD", p_ + "file_expiry", std::to_string(f.expires_at), f.id}).status());
    }
    FERRY_ASSIGN_OR_RETURN(RedisReply seq, Call({"INCR", p_ + "seq"}));
    return Call({"ZADD", p_ + "files:" + f.tenant, std::to_string(seq.integer), f.id}).status();
  }

  Status RemoveFileLocked(const std::string& tenant, const std::string& id) {
    FERRY_RETURN_IF_ERROR(Call({"DEL", p_ + "file:" + id, p_ + "file:" + id + ":content"}).status());
    FERRY_RETURN_IF_ERROR(Call({"ZREM", p_ + "file_expiry", id}).status());
    return Call({"ZREM", p_ + "files:" + tenant, id}).status();
  }

  // MULTI, the commands, EXEC on one connection (never a reconnect in between: a command
  // sent outside the transaction would apply alone). EXEC's reply: an array, or nil when
  // a WATCHed key changed.
  Result<RedisReply> Transaction(const std::vector<std::vector<std::string>>& commands) {
    FERRY_ASSIGN_OR_RETURN(RedisReply multi, conn_.Command({"MULTI"}));
    if (multi.is_error()) return Unavailable("redis: MULTI: " + multi.str);
    for (const auto& c : commands) {
      Result<RedisReply> r = conn_.Command(c);
      if (!r.ok()) return r.status();  // the connection is closed: the transaction is gone with it
      if (r->is_error()) {
        (void)conn_.Command({"DISCARD"});
        return Unavailable("redis: " + c[0] + " in a transaction: " + r->str);
      }
    }
    Result<RedisReply> exec = conn_.Command({"EXEC"});
    if (!exec.ok()) return exec.status();
    return exec;
  }

  Result<BatchInfo> LoadBatch(const std::string& tenant, const std::string& id) {
    std::vector<std::string> args = {"HMGET", p_ + "batch:" + id, "record", "tenant"};
    for (const char* f : kStatusFields) args.push_back(f);
    FERRY_ASSIGN_OR_RETURN(RedisReply r, Call(args));
    if (r.elements.size() != args.size() - 2 || r.elements[0].is_nil() ||
        (!tenant.empty() && r.elements[1].str != tenant)) {
      return NotFound("no batch with id '" + id + "'");
    }
    BatchInfo b = BatchInfo::FromRecord(json::parse(r.elements[0].str, nullptr, false));
    const auto field = [&](size_t i) -> const RedisReply& { return r.elements[2 + i]; };
    b.status = field(0).str;
    b.output_file_id = field(1).str;
    b.error_file_id = field(2).str;
    int64_t* times[] = {&b.finalizing_at, &b.completed_at, &b.failed_at, &b.expired_at, &b.cancelling_at, &b.cancelled_at,
                        &b.completed, &b.failed, &b.cancelled, &b.total};
    for (size_t i = 0; i < std::size(times); ++i) *times[i] = ToInt(field(3 + i));
    return b;
  }

  // Builds the output and error files of a batch whose last result is in, under a lock
  // that a dead finalizer's lease releases; idempotent (the file ids follow from the batch's).
  Status Finalize(const std::string& id) {
    const std::string key = p_ + "batch:" + id;
    FERRY_ASSIGN_OR_RETURN(RedisReply got, Call({"SET", key + ":finalize_lock", "1", "NX", "PX", std::to_string(options_.lease_ms)}));
    if (got.is_nil()) return Status::Ok();  // another replica is at it
    FERRY_ASSIGN_OR_RETURN(BatchInfo b, LoadBatch("", id));
    if (IsTerminal(b.status)) return Call({"SREM", p_ + "finalizing", id}).status();
    FERRY_ASSIGN_OR_RETURN(RedisReply before, Call({"HGET", key, "status_before_final"}));
    if (!before.is_nil()) b.status = before.str;
    FERRY_ASSIGN_OR_RETURN(RedisReply all, Call({"HGETALL", key + ":results"}));
    std::vector<std::pair<int64_t, EntryResult>> results;
    for (size_t i = 0; i + 1 < all.elements.size(); i += 2) {
      const std::string& v = all.elements[i + 1].str;
      const size_t t1 = v.find('\t');
      const size_t t2 = t1 == std::string::npos ? std::string::npos : v.find('\t', t1 + 1);
      if (t2 == std::string::npos) continue;
      results.push_back({std::stoll(v.substr(0, t1)),
                         EntryResult{static_cast<Outcome>(std::stoi(v.substr(t1 + 1, t2 - t1 - 1))), v.substr(t2 + 1)}});
    }
    const BatchOutputs outs = AssembleOutputs(results);
    const int64_t now = NowUnix();
    const std::string suffix = id.substr(id.find('_') + 1);
    std::string out_id, err_id;
    const int64_t expires = b.output_expires_after_s > 0 ? now + b.output_expires_after_s : 0;
    if (!outs.output.empty()) {
      out_id = "file-" + suffix + "o";
      FERRY_RETURN_IF_ERROR(PutFileLocked(FileInfo{out_id, b.tenant, id + "_output.jsonl", "batch_output",
                                                   static_cast<int64_t>(outs.output.size()), now, expires},
                                          outs.output));
    }
    if (!outs.errors.empty()) {
      err_id = "file-" + suffix + "e";
      FERRY_RETURN_IF_ERROR(PutFileLocked(FileInfo{err_id, b.tenant, id + "_error.jsonl", "batch_output",
                                                   static_cast<int64_t>(outs.errors.size()), now, expires},
                                          outs.errors));
    }
    const std::string final_status = FinalStatus(b, now);
    std::string at_field = final_status + "_at";
    FERRY_RETURN_IF_ERROR(Call({"HSET", key, "output_file_id", out_id, "error_file_id", err_id, "finalizing_at",
                                std::to_string(now), at_field, std::to_string(now), "status", final_status})
                              .status());
    FERRY_RETURN_IF_ERROR(Call({"SREM", p_ + "finalizing", id}).status());
    (void)Call({"DEL", key + ":results", key + ":finalize_lock"});
    return Status::Ok();
  }

  // One command; reconnects first when the connection is down (at most once per backoff).
  Result<RedisReply> Call(const std::vector<std::string>& args) {
    if (!conn_.connected()) {
      const auto now = Clock::now();
      if (now < next_attempt_) return Unavailable("redis: reconnecting (" + last_error_ + ")");
      Status st = conn_.Connect(address_, 5000);
      if (!st.ok()) {
        backoff_ms_ = backoff_ms_ == 0 ? 50 : std::min<int64_t>(backoff_ms_ * 2, options_.reconnect_max_ms);
        next_attempt_ = now + std::chrono::milliseconds(backoff_ms_);
        last_error_ = st.message();
        return st;
      }
      ++connects_;
      if (backoff_ms_ != 0) FERRY_LOG_INFO("redis: reconnected to {}:{}", address_.host, address_.port);
      backoff_ms_ = 0;
    }
    Result<RedisReply> r = conn_.Command(args);
    if (!r.ok()) {
      FERRY_LOG_WARN("redis: {}", r.status().message());
      last_error_ = r.status().message();
    }
    if (r.ok() && r->is_error() && (r->str.rfind("LOADING", 0) == 0 || r->str.rfind("BUSY", 0) == 0) &&
        args[0] != "XGROUP") {
      return Unavailable("redis: " + r->str);
    }
    return r;
  }

  const QueueOptions options_;
  const RedisAddress address_;
  const std::string p_;
  std::mutex mu_;
  RedisConnection conn_;  // GUARDED_BY(mu_)
  Clock::time_point next_attempt_{};
  int64_t backoff_ms_ = 0;
  std::string last_error_;
  std::string claim_cursor_ = "0-0";
  uint64_t connects_ = 0;  // connections made so far
};

}  // namespace

Result<std::unique_ptr<Store>> OpenRedisStore(const QueueOptions& options) {
  FERRY_ASSIGN_OR_RETURN(RedisAddress address, ParseRedisUrl(options.url));
  auto store = std::make_unique<RedisStore>(options, address);
  // The server may start before Redis does: try for a while, then fail the start.
  Status st;
  for (int attempt = 0; attempt < 50; ++attempt) {
    st = store->Init();
    if (st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!st.ok()) return Unavailable("queue.url: " + st.message());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace ferry::batch
