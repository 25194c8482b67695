#include "worker/parallel/group_watchdog.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace mtrain {
namespace {

// How often a waiting member checks whether it was aborted: an Abort (a generation being
// torn down) must not wait out the whole watchdog wait.
constexpr absl::Duration kAbortCheckInterval = absl::Milliseconds(100);

// A message naming hundreds of missing ranks helps nobody; the count still tells.
constexpr size_t kMaxListedPeers = 8;

struct Report {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  GroupOperation op;
};

std::string Serialize(const Report& report) {
  return absl::StrCat(static_cast<int>(report.code), "\n", report.op.verb, "\n", report.op.number,
                      "\n", report.op.peer, "\n", report.op.rest);
}

// nullopt for anything not written by Serialize (a stale or foreign key).
std::optional<Report> Parse(const std::string& value) {
  const std::vector<std::string> fields = absl::StrSplit(value, absl::MaxSplits('\n', 4));
  if (fields.size() != 5) return std::nullopt;
  int code = 0;
  Report report;
  if (!absl::SimpleAtoi(fields[0], &code) || !absl::SimpleAtoi(fields[2], &report.op.number) ||
      !absl::SimpleAtoi(fields[3], &report.op.peer)) {
    return std::nullopt;
  }
  report.code = static_cast<absl::StatusCode>(code);
  report.op.verb = fields[1];
  report.op.rest = fields[4];
  return report;
}

// What a peer's report says it did, e.g. "timed out in Recv #3 from group rank 0 ...".
std::string Describe(const Report& report) {
  const std::string op = report.op.Text();
  switch (report.code) {
    case absl::StatusCode::kDeadlineExceeded:
      return absl::StrCat("timed out in ", op);
    case absl::StatusCode::kUnavailable:
      return absl::StrCat("lost its connections in ", op);
    case absl::StatusCode::kFailedPrecondition:
      return absl::StrCat("was aborted in ", op);
    default:
      return absl::StrCat("failed in ", op, " (", absl::StatusCodeToString(report.code), ")");
  }
}

bool IsHang(absl::StatusCode code) {
  return code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable;
}

}  // namespace

std::string GroupOperation::Text() const { return absl::StrCat(verb, " #", number, rest); }

bool GroupOperation::operator==(const GroupOperation& other) const {
  return verb == other.verb && number == other.number && rest == other.rest && peer == other.peer;
}

GroupWatchdog::GroupWatchdog(KeyValueStore* store, const GroupSpec& spec, int rank)
    : store_(store),
      key_prefix_(absl::StrCat(spec.name, "/watchdog/")),
      display_name_(GroupDisplayName(spec)),
      members_(spec.members),
      rank_(rank),
      timeout_(spec.timeout),
      wait_(std::min(spec.watchdog_wait, spec.timeout)),
      sends_to_(spec.members.size(), 0),
      recvs_from_(spec.members.size(), 0) {}

GroupOperation GroupWatchdog::NextCollective(const std::string& verb, const std::string& rest) {
  GroupOperation op;
  op.verb = verb;
  op.number = ++collectives_;
  op.rest = rest;
  return op;
}

GroupOperation GroupWatchdog::NextSend(int peer, uint64_t tag) {
  GroupOperation op;
  op.verb = "Send";
  op.number = ++sends_to_[peer];
  op.rest = absl::StrCat(" to ", PeerText(peer), " with tag ", tag);
  op.peer = peer;
  return op;
}

GroupOperation GroupWatchdog::NextRecv(int peer, uint64_t tag) {
  GroupOperation op;
  op.verb = "Recv";
  op.number = ++recvs_from_[peer];
  op.rest = absl::StrCat(" from ", PeerText(peer), " with tag ", tag);
  op.peer = peer;
  return op;
}

std::string GroupWatchdog::PeerText(int peer) const {
  return absl::StrCat("group rank ", peer, " (global rank ", members_[peer], ")");
}

std::string GroupWatchdog::MemberText(int rank) const {
  return absl::StrCat("global rank ", members_[rank], " (group rank ", rank, ")");
}

std::string GroupWatchdog::KeyOf(int rank) const { return absl::StrCat(key_prefix_, rank); }

absl::Status GroupWatchdog::Explain(const GroupOperation& op, const absl::Status& failure,
                                    absl::string_view detail,
                                    const std::function<bool()>& aborted) {
  if (failure.ok()) return failure;
  // Assembles "<message>; <verdict>; <detail>" under `code`.
  const auto finish = [&](absl::StatusCode code, std::string message, const std::string& verdict) {
    if (!verdict.empty()) absl::StrAppend(&message, "; ", verdict);
    if (!detail.empty()) absl::StrAppend(&message, "; ", detail);
    return absl::Status(code, message);
  };
  const std::string message(failure.message());
  const bool first = !reported_.exchange(true);
  if (store_ == nullptr || wait_ <= absl::ZeroDuration() || !first) {
    return finish(failure.code(), message, "");
  }
  const absl::Status published = store_->Set(KeyOf(rank_), Serialize(Report{failure.code(), op}));
  // Only a hang needs the peers' side; other failures are published for the peers' sake.
  if (!IsHang(failure.code())) return finish(failure.code(), message, "");
  if (!published.ok()) {
    return finish(failure.code(), message,
                  absl::StrCat("the watchdog could not tell who is missing: publishing this "
                               "member's report failed: ",
                               published.message()));
  }

  std::vector<int> peers;
  if (op.collective()) {
    for (int r = 0; r < static_cast<int>(members_.size()); ++r) {
      if (r != rank_) peers.push_back(r);
    }
  } else {
    peers.push_back(op.peer);
  }
  std::vector<std::string> keys;
  for (int peer : peers) keys.push_back(KeyOf(peer));

  // Wait in short slices so that an Abort is noticed. The store's DEADLINE_EXCEEDED only
  // means that some report is still missing, which the reads below sort out.
  const absl::Time deadline = absl::Now() + wait_;
  bool cut_short = false;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    const absl::Status waited = store_->Wait(keys, std::min(left, kAbortCheckInterval));
    if (waited.ok()) break;
    if (waited.code() != absl::StatusCode::kDeadlineExceeded) {
      return finish(failure.code(), message,
                    absl::StrCat("the watchdog could not tell who is missing: ", waited.message()));
    }
    if (aborted && aborted()) {
      cut_short = true;
      break;
    }
  }

  std::vector<int> missing;
  std::vector<std::string> elsewhere;  // "<member>: <what it reported>"
  int timed_out_here = -1;             // a peer that timed out in this very operation
  for (int peer : peers) {
    const absl::StatusOr<std::string> value = store_->Get(KeyOf(peer));
    if (!value.ok()) {
      if (value.status().code() == absl::StatusCode::kNotFound) {
        missing.push_back(peer);
        continue;
      }
      return finish(
          failure.code(), message,
          absl::StrCat("the watchdog could not tell who is missing: ", value.status().message()));
    }
    const std::optional<Report> report = Parse(*value);
    if (!report.has_value()) {
      elsewhere.push_back(absl::StrCat(MemberText(peer), ": unreadable watchdog report"));
      continue;
    }
    if (op.collective() && report->op == op) {  // it arrived
      if (report->code == absl::StatusCode::kDeadlineExceeded && timed_out_here < 0) {
        timed_out_here = peer;
      }
      continue;
    }
    std::string text = absl::StrCat(MemberText(peer), ": ", Describe(*report));
    if (op.collective() && report->op.collective() && report->op.number == op.number) {
      absl::StrAppend(&text, " (members called different collectives as #", op.number, ")");
    }
    elsewhere.push_back(std::move(text));
  }

  std::vector<std::string> not_arrived;
  if (!missing.empty()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < missing.size() && i < kMaxListedPeers; ++i) {
      names.push_back(MemberText(missing[i]));
    }
    if (missing.size() > kMaxListedPeers) {
      names.push_back(absl::StrCat("and ", missing.size() - kMaxListedPeers, " more"));
    }
    not_arrived.push_back(absl::StrCat(
        absl::StrJoin(names, ", "), ": ",
        cut_short ? "no watchdog report before the group was aborted"
                  : absl::StrCat("no watchdog report within ", absl::FormatDuration(wait_),
                                 " (hung, dead or behind)")));
  }
  for (size_t i = 0; i < elsewhere.size() && i < kMaxListedPeers; ++i) {
    not_arrived.push_back(elsewhere[i]);
  }
  if (elsewhere.size() > kMaxListedPeers) {
    not_arrived.push_back(
        absl::StrCat("and ", elsewhere.size() - kMaxListedPeers, " more elsewhere"));
  }

  std::string verdict;
  if (!op.collective() && missing.empty() && !elsewhere.empty()) {
    // The peer reported, so it is alive; what it was doing explains the rest (a deadlock,
    // or a chain of waits leading to the member that really hangs).
    verdict = absl::StrCat("the peer reported: ", elsewhere.front());
  } else if (!not_arrived.empty()) {
    verdict = absl::StrCat("did not arrive: ", absl::StrJoin(not_arrived, "; "));
  } else if (op.collective()) {
    verdict = absl::StrCat("every member reached it (the watchdog heard from all ", members_.size(),
                           "): the transport stalled, not a member");
  }
  // A peer's timeout closed its connections, which is what failed the transport here: the
  // operation timed out, and this member says so like the one that timed out first.
  if (failure.code() == absl::StatusCode::kUnavailable && timed_out_here >= 0) {
    return finish(absl::StatusCode::kDeadlineExceeded,
                  absl::StrCat(op.Text(), " in group ", display_name_, " did not complete within ",
                               absl::FormatDuration(timeout_), ": ", MemberText(timed_out_here),
                               " timed out in it and closed its connections"),
                  verdict);
  }
  return finish(failure.code(), message, verdict);
}

}  // namespace mtrain
