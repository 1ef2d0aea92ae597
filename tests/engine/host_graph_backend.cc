#include "host_graph_backend.h"

#include <algorithm>

namespace ferry::testing {

namespace {

// Packs `inputs` into `buffer` and returns views of it alone: the spans are decoded from the
// packed batch description into `spans`, as a GPU kernel would read them.
backend::StepTensors PackAndView(const backend::StepInputs& inputs, const backend::StepInputLayout& layout,
                                 std::vector<int32_t>& buffer, std::vector<backend::SeqSpan>& spans) {
  buffer.resize(static_cast<size_t>(layout.total));
  backend::PackStepInputs(inputs, layout, buffer.data());
  backend::StepTensors t = backend::StepTensorsAt(inputs, layout, buffer.data(), Device::Cpu());
  const int S = layout.num_seqs;
  const int32_t* meta = t.attention.meta.data<int32_t>();
  spans.resize(static_cast<size_t>(S));
  for (int i = 0; i < S; ++i) {
    spans[i] = backend::SeqSpan{meta[i], meta[S + i], meta[2 * S + i],
                                layout.max_blocks_per_seq > 0 ? meta + 3 * S + i * layout.max_blocks_per_seq : nullptr};
  }
  t.attention.spans = spans;
  return t;
}

}  // namespace

class HostGraphBackend::Recorder final : public backend::GraphRecorder {
 public:
  struct HostRecording final : Recording {
    std::vector<int32_t> inputs;
    std::vector<backend::SeqSpan> spans;
    backend::StepTensors views;
    backend::StepBody body;
    Tensor output;
  };

  explicit Recorder(HostGraphBackend& be) : be_(be) {}

  Result<Tensor> RunEager(const backend::StepInputs& inputs, const backend::StepBody& body) override {
    ++eager_runs;
    FERRY_ASSIGN_OR_RETURN(const backend::StepTensors t, be_.UploadStep(inputs));
    return body(t);
  }
  Result<std::unique_ptr<Recording>> Record(const backend::StepInputs& inputs, const backend::StepInputLayout& layout,
                                            const backend::StepBody& body, Tensor& output) override {
    ++records;
    auto rec = std::make_unique<HostRecording>();
    rec->views = PackAndView(inputs, layout, rec->inputs, rec->spans);
    rec->body = body;
    FERRY_ASSIGN_OR_RETURN(rec->output, body(rec->views));
    output = rec->output;
    return std::unique_ptr<Recording>(std::move(rec));
  }
  Status Replay(Recording& recording, const backend::StepInputs& inputs,
                const backend::StepInputLayout& layout) override {
    ++replays;
    auto& rec = static_cast<HostRecording&>(recording);
    rec.views = PackAndView(inputs, layout, rec.inputs, rec.spans);
    FERRY_ASSIGN_OR_RETURN(const Tensor out, rec.body(rec.views));
    if (out.shape() != rec.output.shape() || out.dtype() != rec.output.dtype()) {
      return Internal("a replay produced " + out.DebugString() + ", the recording " + rec.output.DebugString());
    }
    std::copy_n(static_cast<const char*>(out.raw()), out.nbytes(), static_cast<char*>(rec.output.raw()));
    return Status::Ok();
  }

  int eager_runs = 0;
  int records = 0;
  int replays = 0;

 private:
  HostGraphBackend& be_;
};

HostGraphBackend::HostGraphBackend()
    : cpu_(backend::MakeCpuBackend()),
      recorder_(std::make_unique<Recorder>(*this)),
      graphs_(std::make_unique<backend::StepGraphs>(*recorder_)) {}

HostGraphBackend::~HostGraphBackend() = default;

Result<backend::StepTensors> HostGraphBackend::UploadStep(const backend::StepInputs& inputs) {
  FERRY_ASSIGN_OR_RETURN(const backend::StepInputLayout layout, backend::PlanStepInputs(inputs, 0));
  return PackAndView(inputs, layout, eager_inputs_, eager_spans_);
}

int HostGraphBackend::eager_runs() const { return recorder_->eager_runs; }
int HostGraphBackend::records() const { return recorder_->records; }
int HostGraphBackend::replays() const { return recorder_->replays; }

}  // namespace ferry::testing
