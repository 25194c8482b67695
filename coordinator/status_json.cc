#include "coordinator/status_json.h"

#include <cmath>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `text`, or 0 if it is not one
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(absl::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // bounds of the second byte
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (text.size() < length || byte(1) < low || byte(1) > high) return 0;
  for (size_t i = 2; i < length; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return length;
}

std::string EnumName(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

// Builds one JSON object field by field: the values are already JSON text.
class JsonObject {
 public:
  JsonObject& Raw(absl::string_view key, absl::string_view json) {
    absl::StrAppend(&text_, text_.size() > 1 ? "," : "", JsonString(key), ":", json);
    return *this;
  }
  JsonObject& String(absl::string_view key, absl::string_view value) {
    return Raw(key, JsonString(value));
  }
  JsonObject& Int(absl::string_view key, int64_t value) { return Raw(key, absl::StrCat(value)); }
  JsonObject& Number(absl::string_view key, double value) { return Raw(key, JsonNumber(value)); }
  JsonObject& Bool(absl::string_view key, bool value) { return Raw(key, value ? "true" : "false"); }
  JsonObject& Null(absl::string_view key) { return Raw(key, "null"); }
  std::string Close() { return text_ + "}"; }

 private:
  std::string text_ = "{";
};

template <typename T, typename ToJson>
std::string JsonArray(const T& items, ToJson to_json) {
  std::string text = "[";
  for (const auto& item : items) absl::StrAppend(&text, text.size() > 1 ? "," : "", to_json(item));
  return text + "]";
}

}  // namespace

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  while (!text.empty()) {
    const unsigned char c = static_cast<unsigned char>(text[0]);
    size_t consumed = 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else if (c < 0x80) {
          // '<' too, so that "</script>" in a job message can never end a script block
          // should a page ever inline one of these documents.
          if (c == '<') {
            out += "\\u003c";
          } else {
            out += static_cast<char>(c);
          }
        } else if (const size_t length = Utf8SequenceLength(text); length > 0) {
          out.append(text.data(), length);
          consumed = length;
        } else {
          out += "\\ufffd";
        }
    }
    text.remove_prefix(consumed);
  }
  out += "\"";
  return out;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  // 10 significant digits: more than a chart or a table shows, far shorter than %.17g.
  return absl::StrFormat("%.10g", value);
}

std::string JobJson(const JobStatus& job) {
  JobSpec spec = job.spec();
  ApplyJobSpecDefaults(&spec);
  JsonObject object;
  object.String("job_id", job.job_id())
      .String("name", spec.name())
      .String("state", EnumName(JobState_Name(job.state()), "JOB_STATE_"))
      .Int("step", job.step())
      .Int("steps", spec.train().steps());
  // Before the first step the zeros in the status mean "nothing yet", not a zero loss.
  if (job.has_latest()) {
    object.Number("loss", job.loss())
        .Number("tokens_per_second", job.tokens_per_second())
        .Number("mfu", job.latest().mfu())
        .Number("step_seconds", job.latest().step_seconds());
  } else {
    object.Null("loss").Null("tokens_per_second").Null("mfu").Null("step_seconds");
  }
  object.Int("generation", job.generation())
      .Int("restarts", job.restarts())
      .String("message", job.message())
      .Int("submitted_unix_ms", job.submitted_unix_ms())
      .Int("updated_unix_ms", job.updated_unix_ms())
      .String("device", EnumName(Device_Name(spec.device()), "DEVICE_"))
      .Raw("parallel", JsonObject()
                           .Int("tensor", spec.parallel().tensor())
                           .Int("pipeline", spec.parallel().pipeline())
                           .Int("data", spec.parallel().data())
                           .Close())
      .Raw("workers", JsonArray(job.workers(), [](const std::string& w) { return JsonString(w); }))
      .Bool("listing_shortened", job.listing_shortened());
  return object.Close();
}

std::string JobsJson(const std::vector<JobStatus>& jobs, absl::string_view next_page_token) {
  return JsonObject()
      .Raw("jobs", JsonArray(jobs, JobJson))
      .String("next_page_token", next_page_token)
      .Close();
}

std::string StepsJson(absl::string_view job_id, const std::vector<StepMetrics>& steps, bool more,
                      absl::string_view next_page_token) {
  const auto step_json = [](const StepMetrics& m) {
    JsonObject object;
    object.Int("step", m.step()).Int("generation", m.generation());
    if (m.has_loss()) {
      object.Number("loss", m.loss());
    } else {
      object.Null("loss");
    }
    return object.Number("tokens_per_second", m.tokens_per_second())
        .Number("step_seconds", m.step_seconds())
        .Number("mfu", m.mfu())
        .Close();
  };
  return JsonObject()
      .String("job_id", job_id)
      .Raw("steps", JsonArray(steps, step_json))
      .Bool("more", more)
      .String("next_page_token", next_page_token)
      .Close();
}

std::string WorkersJson(const std::vector<WorkerStatus>& workers, int64_t heartbeat_timeout_ms) {
  const auto worker_json = [](const WorkerStatus& w) {
    return JsonObject()
        .String("worker_id", w.worker().worker_id())
        .String("host", w.worker().host())
        .String("device_kind", EnumName(DeviceKind_Name(w.worker().device_kind()), "DEVICE_KIND_"))
        .String("device_name", w.worker().device_name())
        .Int("device_count", w.worker().device_count())
        .Int("memory_bytes", w.worker().memory_bytes())
        .Bool("alive", w.alive())
        .String("state", EnumName(WorkerState_Name(w.state()), "WORKER_STATE_"))
        .Int("last_seen_ms_ago", w.last_seen_ms_ago())
        .String("job_id", w.job_id())
        .Close();
  };
  return JsonObject()
      .Int("heartbeat_timeout_ms", heartbeat_timeout_ms)
      .Raw("workers", JsonArray(workers, worker_json))
      .Close();
}

std::string ErrorJson(const absl::Status& status) {
  return JsonObject()
      .String("code", absl::StatusCodeToString(status.code()))
      .String("error", status.message())
      .Close();
}

}  // namespace mtrain
