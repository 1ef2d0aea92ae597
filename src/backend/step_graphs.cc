#include "backend/step_graphs.h"

#include <string>

#include "core/logging.h"

namespace ferry::backend {

Result<Tensor> StepGraphs::Run(const GraphKey& key, const StepInputs& inputs, const StepBody& body) {
  if (key.plan_context <= 0) return InvalidArgument("a step graph needs a positive planning context");
  FERRY_ASSIGN_OR_RETURN(const StepInputLayout layout, PlanStepInputs(inputs, key.plan_context));
  const Id id{key.owner, key.id};
  if (eager_only_.count(id) != 0) return recorder_.RunEager(inputs, body);
  auto it = graphs_.find(id);
  if (it == graphs_.end()) {
    // First sight: the eager run uploads host weights, plans the GEMMs and sizes their
    // scratch, none of which may happen while recording; then the step is recorded.
    FERRY_RETURN_IF_ERROR(recorder_.RunEager(inputs, body).status());
    Entry entry;
    entry.layout = layout;
    Result<std::unique_ptr<GraphRecorder::Recording>> recorded = recorder_.Record(inputs, layout, body, entry.output);
    if (recorded.ok()) {
      entry.recording = std::move(recorded).value();
      Tensor output = entry.output;
      graphs_.emplace(id, std::move(entry));
      return output;
    }
    // The eager run worked, so the recording is what failed: this key runs eagerly from now
    // on, and this step again, since the recording's run left no output.
    FERRY_LOG_WARN("step graph {} cannot be recorded ({}); it runs eagerly", key.id, recorded.status().message());
    eager_only_.insert(id);
    return recorder_.RunEager(inputs, body);
  }
  Entry& entry = it->second;
  if (!(entry.layout == layout)) {
    const std::string recorded = entry.layout.ToString();
    graphs_.erase(it);  // recorded afresh by the next step of this key
    return Internal("step graph replay diverged: the step has " + layout.ToString() + ", the recording " + recorded);
  }
  const Status replayed = recorder_.Replay(*entry.recording, inputs, layout);
  if (!replayed.ok()) {
    graphs_.erase(it);
    return replayed;
  }
  return entry.output;
}

void StepGraphs::Release(int64_t owner) {
  std::erase_if(graphs_, [owner](const auto& g) { return g.first.first == owner; });
  std::erase_if(eager_only_, [owner](const Id& id) { return id.first == owner; });
}

void StepGraphs::Clear() {
  graphs_.clear();
  eager_only_.clear();
}

}  // namespace ferry::backend
