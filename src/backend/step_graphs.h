// Step graphs, whatever device records them: the first step of a graph key runs eagerly
// and is then recorded over persistent input buffers; later steps of that key copy their
// inputs into those buffers and replay the recording. The device side is a GraphRecorder
// (CUDA graphs: backend/cuda/graph_recorder.h); the policy here has no device code, so it is
// tested on any machine.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "backend/step_inputs.h"

namespace ferry::backend {

// What a device does for step graphs. Thread-compatible, like the backend it belongs to.
class GraphRecorder {
 public:
  // One recorded step: its persistent input buffers and its device work.
  class Recording {
   public:
    virtual ~Recording() = default;
  };

  virtual ~GraphRecorder() = default;
  // The step run as any step is: inputs uploaded, body run eagerly.
  virtual Result<Tensor> RunEager(const StepInputs& inputs, const StepBody& body) = 0;
  // Called right after an eager run of the same step (which settled uploads, plans and
  // scratch sizes): records `body` reading persistent input buffers that hold `inputs` as
  // `layout` places them, and runs the recording once. `output` gets the body's result,
  // which every replay rewrites in place.
  virtual Result<std::unique_ptr<Recording>> Record(const StepInputs& inputs, const StepInputLayout& layout,
                                                    const StepBody& body, Tensor& output) = 0;
  // Copies `inputs` (of the recording's layout) into the recording's buffers and runs it.
  virtual Status Replay(Recording& recording, const StepInputs& inputs, const StepInputLayout& layout) = 0;
};

// The recordings of one backend by (owner, id), and the keys whose recording failed (they
// run eagerly from then on). Thread-compatible.
class StepGraphs {
 public:
  explicit StepGraphs(GraphRecorder& recorder) : recorder_(recorder) {}

  // Runs one step as the recording for `key`: records it on first sight, replays it after.
  // Inputs whose layout differs from the recording's fail the step (Internal, "diverged") and
  // drop the recording, which the next step of the key records afresh. The result is the
  // recording's output buffer, valid until the next Run.
  Result<Tensor> Run(const GraphKey& key, const StepInputs& inputs, const StepBody& body);
  // Drops every recording of `owner` and forgets its failed keys.
  void Release(int64_t owner);
  void Clear();
  int count() const { return static_cast<int>(graphs_.size()); }

 private:
  using Id = std::pair<int64_t, int64_t>;  // (owner, id)
  struct Entry {
    std::unique_ptr<GraphRecorder::Recording> recording;
    StepInputLayout layout;
    Tensor output;
  };

  GraphRecorder& recorder_;
  std::map<Id, Entry> graphs_;
  std::set<Id> eager_only_;
};

}  // namespace ferry::backend
