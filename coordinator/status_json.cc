#include "coordinator/status_json.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/json_writer.h"
#include "common/step_metrics_format.h"
#include "spec/job_spec_defaults.h"

namespace mtrain {
namespace {

// 10 significant digits: more than a chart or a table shows, far shorter than %.17g.
constexpr JsonNumberFormat kApiNumbers = JsonNumberFormat::Significant(10);

std::string EnumName(const std::string& name, absl::string_view prefix) {
  return absl::StartsWith(name, prefix) ? name.substr(prefix.size()) : name;
}

}  // namespace

std::string JobJson(const JobStatus& job) {
  JobSpec spec = job.spec();
  ApplyJobSpecDefaults(&spec);
  JsonObject object(kApiNumbers);
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
      .Raw("parallel", JsonObject(kApiNumbers)
                           .Int("tensor", spec.parallel().tensor())
                           .Int("pipeline", spec.parallel().pipeline())
                           .Int("data", spec.parallel().data())
                           .Close())
      .Raw("workers", JsonArray(job.workers(), [](const std::string& w) { return JsonString(w); }))
      .Bool("listing_shortened", job.listing_shortened());
  return object.Close();
}

std::string JobsJson(const std::vector<JobStatus>& jobs, absl::string_view next_page_token) {
  return JsonObject(kApiNumbers)
      .Raw("jobs", JsonArray(jobs, JobJson))
      .String("next_page_token", next_page_token)
      .Close();
}

std::string StepsJson(absl::string_view job_id, const std::vector<StepMetrics>& steps, bool more,
                      absl::string_view next_page_token) {
  const auto step_json = [](const StepMetrics& m) {
    JsonObject object(kApiNumbers);
    object.Int("step", m.step()).Int("generation", m.generation());
    if (m.has_loss()) {
      object.Number("loss", m.loss());
    } else {
      object.Null("loss");
    }
    object.Number("tokens_per_second", m.tokens_per_second())
        .Number("step_seconds", m.step_seconds())
        .Number("mfu", m.mfu());
    // Steps with an evaluation only (train.eval_interval).
    if (m.has_validation_loss()) object.Number("validation_loss", m.validation_loss());
    // BERT's: the loss's parts and the two heads' accuracies.
    if (m.has_validation_mlm_loss()) {
      object.Number("validation_mlm_loss", m.validation_mlm_loss())
          .Number("validation_sop_loss", m.validation_sop_loss())
          .Number("validation_mlm_accuracy", m.validation_mlm_accuracy())
          .Number("validation_sop_accuracy", m.validation_sop_accuracy());
    }
    // BERT's multiple-choice head: the share of questions right (training and validation).
    if (m.has_choice_accuracy()) object.Number("choice_accuracy", m.choice_accuracy());
    if (m.has_validation_choice_accuracy()) {
      object.Number("validation_choice_accuracy", m.validation_choice_accuracy());
    }
    // Checkpoint steps of a job with train.eval_tasks.
    if (m.evals_size() > 0) object.Raw("evals", JsonArray(m.evals(), EvalTaskResultJson));
    // Those of a job with train.generate.
    if (m.generations_size() > 0) {
      object.Raw("generations", JsonArray(m.generations(), GeneratedTextJson));
    }
    return object.Close();
  };
  return JsonObject(kApiNumbers)
      .String("job_id", job_id)
      .Raw("steps", JsonArray(steps, step_json))
      .Bool("more", more)
      .String("next_page_token", next_page_token)
      .Close();
}

std::string WorkersJson(const std::vector<WorkerStatus>& workers, int64_t heartbeat_timeout_ms) {
  const auto worker_json = [](const WorkerStatus& w) {
    return JsonObject(kApiNumbers)
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
  return JsonObject(kApiNumbers)
      .Int("heartbeat_timeout_ms", heartbeat_timeout_ms)
      .Raw("workers", JsonArray(workers, worker_json))
      .Close();
}

std::string RanksJson(absl::string_view job_id, const std::vector<RankReport>& ranks) {
  const auto rank_json = [](const RankReport& r) {
    JsonObject object(kApiNumbers);
    object.Int("rank", r.coordinates.global_rank())
        .Int("tp_rank", r.coordinates.tp_rank())
        .Int("pp_stage", r.coordinates.pp_rank())
        .Int("dp_rank", r.coordinates.dp_rank())
        .Int("step", r.step)
        .Number("last_step_seconds", r.last_step_seconds)
        .Number("pipeline_bubble", r.pipeline_bubble);
    if (r.activation_peak_bytes >= 0) {
      object.Int("activation_memory_peak_bytes", r.activation_peak_bytes);
    } else {
      object.Null("activation_memory_peak_bytes");
    }
    return object.Close();
  };
  return JsonObject(kApiNumbers)
      .String("job_id", job_id)
      .Raw("ranks", JsonArray(ranks, rank_json))
      .Close();
}

std::string ErrorJson(const absl::Status& status) {
  return JsonObject(kApiNumbers)
      .String("code", absl::StatusCodeToString(status.code()))
      .String("error", status.message())
      .Close();
}

}  // namespace mtrain
