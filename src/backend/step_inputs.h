// A step's small inputs (token ids, positions, KV slots, spans, block tables, logit rows):
// the host arrays its driver fills once per step (StepInputs), the views the ops read
// (StepTensors), and how a device packs them into one buffer (StepInputLayout) so that one
// copy uploads a step and a step graph's recording reads the same buffer on every replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/attention_params.h"

namespace ferry::backend {

using kernels::SeqSpan;

// One step's inputs as host arrays. Views: the arrays must stay unchanged until the backend
// has taken them (UploadStep and RunGraph copy them before returning).
struct StepInputs {
  std::span<const int32_t> token_ids;   // [T]
  std::span<const int32_t> positions;   // [T], or empty
  std::span<const int32_t> slots;       // [T] KV slot of each token (decoders), or empty
  std::span<const int32_t> type_ids;    // [T] token types (encoders), or empty
  std::span<const SeqSpan> spans;       // [S]; block tables are host arrays
  std::span<const int32_t> logit_rows;  // [R] rows whose outputs are wanted, or empty
  int block_tokens = 0;                 // tokens per KV block, which the block tables index; 0: no cache
  // Token ids the host does not know yet (asynchronous steps, Backend::patches_step_tokens):
  // pairs (i, j) with token_ids[i] = (*patch_source)[j], written on the device once the
  // inputs are there; patch_source is an earlier step's PendingTokens::device_tokens().
  std::span<const int32_t> token_patches;
  const Tensor* patch_source = nullptr;
};

// A ragged batch as attention and pooling read it. `spans` is the host's view (the CPU's
// kernels read it); on a device, after UploadStep, `meta` holds the same batch where the
// kernels read it, planned for `max_context_len`. An AttentionBatch made from spans alone
// (the host form) works with every backend: a device copies it over in the op.
struct AttentionBatch {
  AttentionBatch() = default;
  AttentionBatch(std::span<const SeqSpan> host_spans);  // NOLINT: the host form, implicitly
  AttentionBatch(const std::vector<SeqSpan>& host_spans)  // NOLINT
      : AttentionBatch(std::span<const SeqSpan>(host_spans)) {}

  std::span<const SeqSpan> spans;
  int num_seqs = 0;
  int max_q_len = 1;        // bounds every span's q_len (1: decode only)
  int max_context_len = 1;  // bounds every span's context_len (a step graph's: its planning context)
  int max_blocks_per_seq = 0;
  // i32 [3 S + S * max_blocks_per_seq] on the device: q_begin[S], q_len[S], context_len[S],
  // then each sequence's block table padded with zeros to max_blocks_per_seq. Undefined in
  // the host form.
  Tensor meta;
};

// The step's inputs where the ops read them: i32 [n] tensors on the backend's device (views
// of one uploaded buffer on a GPU, of the host arrays on the CPU). An array the step does not
// have is [0]. Valid until the backend's next Synchronize (or, for a step graph, until the
// recording is dropped).
struct StepTensors {
  Tensor token_ids;
  Tensor positions;
  Tensor slots;
  Tensor type_ids;
  Tensor logit_rows;
  AttentionBatch attention;
};

// A host int32 array as an index tensor for an op (a view: the array must outlive it). A
// device backend copies such a tensor over in the op; steps upload theirs once instead.
Tensor HostIndices(std::span<const int32_t> values);
// The StepTensors of the host arrays themselves (what the CPU's upload is).
StepTensors HostStepTensors(const StepInputs& in);

// Where each array sits in the int32 buffer a device uploads for a step, and the attention
// plan the sizes imply. Two steps with equal layouts make the same device work, which is
// what lets a step graph recorded for one replay for the other.
struct StepInputLayout {
  int64_t tokens = 0;  // T
  int64_t rows = 0;    // R
  int num_seqs = 0;    // S
  bool has_positions = false;
  bool has_slots = false;
  bool has_types = false;
  int block_tokens = 0;
  int max_q_len = 1;
  int max_context_len = 1;
  int max_blocks_per_seq = 0;
  // Offsets of the arrays in int32 elements, each a multiple of kAlign.
  int64_t token_ids_at = 0;
  int64_t positions_at = 0;
  int64_t slots_at = 0;
  int64_t type_ids_at = 0;
  int64_t logit_rows_at = 0;
  int64_t meta_at = 0;
  int64_t total = 0;  // elements in the buffer

  static constexpr int64_t kAlign = 64;  // elements: 256 bytes, as the staging ring aligns
  size_t bytes() const { return static_cast<size_t>(total) * sizeof(int32_t); }
  int64_t meta_elements() const { return 3 * int64_t{num_seqs} + int64_t{num_seqs} * max_blocks_per_seq; }
  bool operator==(const StepInputLayout&) const = default;
  std::string ToString() const;
};

// Checks the inputs (array lengths, spans within the rows, contexts and block tables) and
// lays them out. plan_context > 0 plans attention for that context, as a step graph does
// (every span must fit it: OutOfRange otherwise); 0 plans for the batch's longest.
Result<StepInputLayout> PlanStepInputs(const StepInputs& in, int plan_context);
// Writes the inputs into dst[0, layout.total) as `layout` places them (zeros elsewhere).
// `layout` must come from PlanStepInputs for inputs of these sizes.
void PackStepInputs(const StepInputs& in, const StepInputLayout& layout, int32_t* dst);
// The StepTensors over a buffer at `base` on `device` that holds PackStepInputs' output.
StepTensors StepTensorsAt(const StepInputs& in, const StepInputLayout& layout, void* base, Device device);
// An attention batch's meta (see AttentionBatch) for host spans, into dst[3 S + S * max_blocks].
void PackAttentionMeta(std::span<const SeqSpan> spans, int block_tokens, int max_blocks_per_seq, int32_t* dst);

// Step graphs: which recording a step belongs to (recordings bake in their owner's KV
// cache, so each owner has its own), and the longest context any of its sequences may have
// (it sizes the attention launch and the uploaded block tables).
struct GraphKey {
  int64_t owner = 0;
  int64_t id = 0;
  int plan_context = 0;
};

// One step's device work on its uploaded inputs, returning the step's output (a decoder's
// logits). For a step graph it must read nothing from the host but the inputs' sizes, so
// that its recording serves every later step of the same layout.
using StepBody = std::function<Result<Tensor>(const StepTensors& inputs)>;

}  // namespace ferry::backend
