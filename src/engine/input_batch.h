// InputBatch: the model runner's persistent batch (vLLM V1's InputBatch). The requests of the
// step hold dense rows [0, num_rows) that live across steps; a step applies what the scheduler
// changed (rows added and dropped, blocks appended) and refills only the per-token arrays.
#pragma once
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/scheduler.h"
#include "engine/block_table.h"
#include "model/forward_batch.h"

namespace vllm {

class InputBatch {
 public:
  // num_groups: KV cache groups of the scheduler's block tables; the forward batch carries
  // each group's slots and block tables.
  InputBatch(int num_groups, int block_size);
  InputBatch(const InputBatch&) = delete;  // the tables point into batch_
  InputBatch& operator=(const InputBatch&) = delete;

  // Applies one step and fills the forward batch, its sequences in row order (which is not the
  // scheduled order: scheduled_index maps a row back). Finished and preempted requests lose
  // their row; a running request left out of the step is parked (its tables kept aside) until
  // it is scheduled again. prompt_logits_end[k]: positions of out.scheduled[k] below it want
  // logits too (prompt logprobs); empty for none. The batch stays valid until the next call.
  const ForwardBatch& prepare(const core::SchedulerOutput& out,
                              std::span<const int> prompt_logits_end = {});

  // Forgets a request, row or parked; unknown ids are ignored.
  void remove_request(const std::string& id);

  int num_rows() const { return static_cast<int>(row_ids_.size()); }
  const std::string& request_id(int row) const { return row_ids_[row]; }
  // Of the last prepare(): the row's index in out.scheduled, and its first row of the logits
  // (its prompt positions come first, then the one it samples from).
  int scheduled_index(int row) const { return sched_index_[row]; }
  int first_logits_row(int row) const { return first_logits_row_[row]; }
  int num_parked() const { return static_cast<int>(parked_.size()); }
  // Block table per group of a request with a row or parked; empty if unknown (for tests).
  std::vector<std::vector<int>> block_ids(const std::string& id) const;
  const ForwardBatch& batch() const { return batch_; }

 private:
  struct Parked {
    std::vector<std::vector<int>> tables;
    int seq_len = 0;
  };

  int add_row(const std::string& id, const std::vector<std::vector<int>>& tables, int seq_len);
  void remove_row(int row);  // moves the last row into it
  void apply_edits(int row, const core::ScheduledRequest& s);
  void fill_tokens(const core::SchedulerOutput& out, std::span<const int> prompt_logits_end);

  int num_groups_;
  int block_size_;
  // Persistent per row: attn[g].block_tables (BlockTable storage, so attn is never resized)
  // and attn[0].seq_lens (tokens with KV after the step). The per-token arrays are refilled
  // each step, and the other groups' query_start_loc and seq_lens copied from group 0.
  ForwardBatch batch_;
  std::vector<BlockTable> tables_;  // per group
  std::vector<std::string> row_ids_;
  std::unordered_map<std::string, int> row_of_;
  std::unordered_map<std::string, Parked> parked_;
  std::vector<int> sched_index_;       // per row; -1 while prepare() sorts rows out
  std::vector<int> first_logits_row_;  // per row
  std::vector<int> without_row_;       // scratch: scheduled indices that need a row
};

}  // namespace vllm
