// BlockTable: one KV cache group's block tables for the rows of the runner's persistent batch,
// [num_rows, width] row-major and zero (null block) padded: the layout of
// AttentionMeta::block_tables. Rows are edited in place, so a step costs what changed in them.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace vllm {

class BlockTable {
 public:
  // The rows live in *storage, which this table owns from now on (it may be a forward batch's
  // block_tables, read there without a copy). storage must outlive the table.
  explicit BlockTable(std::vector<int32_t>* storage);

  int num_rows() const { return static_cast<int>(num_blocks_.size()); }
  // Row stride (max_blocks_per_seq): grows to a power of two as rows need it, never shrinks.
  int width() const { return width_; }
  int num_blocks(int row) const { return num_blocks_[row]; }
  // The row's num_blocks(row) entries.
  std::span<const int32_t> row(int r) const;

  // Adds a row after the last one holding block_ids.
  void add_row(std::span<const int> block_ids);
  void append(int row, std::span<const int> block_ids);
  // Sets the row's first n entries to the null block (blocks behind a sliding window). Only
  // entries not null yet are written: nulls grow from the front, so the cost is what changed.
  void set_null_prefix(int row, int n);
  // Removes a row by moving the last row into it, so rows stay dense [0, num_rows).
  void remove_row(int row);

 private:
  int32_t* row_data(int r) { return rows_->data() + int64_t(r) * width_; }
  void ensure_width(int num_blocks);

  std::vector<int32_t>* rows_;   // [num_rows * width_]
  std::vector<int> num_blocks_;  // per row
  int width_ = 1;
};

}  // namespace vllm
