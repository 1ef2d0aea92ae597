// A CPU backend with step graphs, so that the step executor's graph path runs on any machine:
// every op is the CPU backend's, and the "recordings" keep their inputs in buffers of their
// own, packed as a GPU uploads them. A replay packs the step's inputs into that buffer and
// runs the recorded body again on views of it alone (the spans the CPU attention reads are
// decoded from the uploaded batch description, block tables included), then copies the
// result into the recording's output buffer, which is what every replay returns. Eager steps
// go through the same packing. Thread-compatible.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/step_graphs.h"

namespace ferry::testing {

class HostGraphBackend final : public backend::Backend {
 public:
  HostGraphBackend();
  ~HostGraphBackend() override;

  Device device() const override { return cpu_->device(); }
  std::string Name() const override { return "cpu with host step graphs"; }
  Result<Tensor> Allocate(const Shape& shape, DType dtype) override { return cpu_->Allocate(shape, dtype); }
  Status PrepareLinear(backend::LinearWeight& w) override { return cpu_->PrepareLinear(w); }
  Result<backend::SerializedLinear> SerializeLinear(const backend::LinearWeight& w) override {
    return cpu_->SerializeLinear(w);
  }
  Result<backend::LinearWeight> DeserializeLinear(const backend::SerializedLinear& s) override {
    return cpu_->DeserializeLinear(s);
  }
  Status Linear(const Tensor& x, const backend::LinearWeight& w, Tensor& y) override { return cpu_->Linear(x, w, y); }
  Status Embedding(const Tensor& table, const Tensor& ids, Tensor& out) override {
    return cpu_->Embedding(table, ids, out);
  }
  Status RmsNorm(const Tensor& x, const Tensor& gamma, float eps, Tensor& out) override {
    return cpu_->RmsNorm(x, gamma, eps, out);
  }
  Status AddRmsNorm(Tensor& residual, const Tensor& delta, const Tensor& gamma, float eps, Tensor& out) override {
    return cpu_->AddRmsNorm(residual, delta, gamma, eps, out);
  }
  Status LayerNorm(const Tensor& x, const Tensor& delta, const Tensor& gamma, const Tensor& beta, float eps,
                   Tensor& out) override {
    return cpu_->LayerNorm(x, delta, gamma, beta, eps, out);
  }
  Status Rope(Tensor& q, Tensor& k, int num_heads, int num_kv_heads, const Tensor& positions,
              const backend::RopeTable& table) override {
    return cpu_->Rope(q, k, num_heads, num_kv_heads, positions, table);
  }
  Status SiluMul(const Tensor& gate_up, Tensor& out) override { return cpu_->SiluMul(gate_up, out); }
  Status Gelu(Tensor& x) override { return cpu_->Gelu(x); }
  Status Tanh(Tensor& x) override { return cpu_->Tanh(x); }
  Status Add(Tensor& x, const Tensor& y) override { return cpu_->Add(x, y); }
  Status WriteKv(const Tensor& k, const Tensor& v, const Tensor& slots, backend::KvLayer& layer) override {
    return cpu_->WriteKv(k, v, slots, layer);
  }
  Status PagedAttention(const Tensor& q, const backend::KvLayer& layer, const backend::AttentionBatch& batch,
                        const backend::AttentionParams& params, Tensor& out) override {
    return cpu_->PagedAttention(q, layer, batch, params, out);
  }
  Status DenseAttention(const Tensor& q, const Tensor& k, const Tensor& v, const backend::AttentionBatch& batch,
                        const backend::AttentionParams& params, Tensor& out) override {
    return cpu_->DenseAttention(q, k, v, batch, params, out);
  }
  Result<Tensor> ToHost(const Tensor& t) override { return cpu_->ToHost(t); }
  Status Synchronize() override { return Status::Ok(); }

  // Packed into a buffer that lives until the next upload, as a GPU's staging ring would.
  Result<backend::StepTensors> UploadStep(const backend::StepInputs& inputs) override;
  bool supports_graphs() const override { return true; }
  Result<Tensor> RunGraph(const backend::GraphKey& key, const backend::StepInputs& inputs,
                          const backend::StepBody& body) override {
    return graphs_->Run(key, inputs, body);
  }
  void ReleaseGraphs(int64_t owner) override { graphs_->Release(owner); }
  int graph_count() const override { return graphs_->count(); }

  // Steps run eagerly, recorded and replayed so far.
  int eager_runs() const;
  int records() const;
  int replays() const;

 private:
  class Recorder;

  std::unique_ptr<backend::Backend> cpu_;
  std::unique_ptr<Recorder> recorder_;
  std::unique_ptr<backend::StepGraphs> graphs_;
  std::vector<int32_t> eager_inputs_;
  std::vector<backend::SeqSpan> eager_spans_;
};

}  // namespace ferry::testing
