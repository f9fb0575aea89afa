#include "engine/remote_ranks.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/backend.h"
#include "util/check.h"

namespace vllm {
namespace {

// The engine's messages between node 0 and the others (the group's own are below 16).
enum Tag : uint32_t {
  kProfile = 16,   // node 0 -> node: run the profile steps; answered by kBudget
  kBudget = 17,    // ok (u8), bytes (i64), the memory line or the error
  kStart = 18,     // num_blocks, block_size: allocate the caches
  kAdd = 19,       // a request: id, prompt, prompt_logprobs (has, value), seed
  kRemove = 20,    // id
  kStep = 21,      // a SchedulerOutput (encode_step)
  kStepDone = 22,  // node -> node 0: Outcome (u8), message
  kAbort = 23,     // node 0 -> node: abort your ranks' collectives
  kBye = 24,       // node 0 -> node: the engine is done
};
enum Outcome : uint8_t { kRan = 0, kAborted = 1, kFailed = 2 };

void put_strings(net::Writer& w, const std::vector<std::string>& v) {
  w.put<uint64_t>(v.size());
  for (const auto& s : v) w.put(std::string_view(s));
}

std::vector<std::string> get_strings(net::Reader& r) {
  const uint64_t n = r.get<uint64_t>();
  std::vector<std::string> v;
  for (uint64_t i = 0; i < n; ++i) v.push_back(r.get_string());
  return v;
}

void put_tables(net::Writer& w, const std::vector<std::vector<int>>& v) {
  w.put<uint64_t>(v.size());
  for (const auto& t : v) w.put(t);
}

std::vector<std::vector<int>> get_tables(net::Reader& r) {
  const uint64_t n = r.get<uint64_t>();
  VLLM_CHECK(n < (1u << 16), "a step with ", n, " KV cache groups");
  std::vector<std::vector<int>> v;
  for (uint64_t i = 0; i < n; ++i) v.push_back(r.get_vector<int>());
  return v;
}

void abort_all(const std::vector<Communicator*>& comms) {
  for (Communicator* c : comms) c->abort();
}

std::vector<Communicator*> communicators_of(const std::vector<const DecoderModel*>& ranks) {
  std::vector<Communicator*> out;
  for (const DecoderModel* m : ranks)
    if (m->communicator()) out.push_back(m->communicator());
  return out;
}

}  // namespace

std::string encode_step(const core::SchedulerOutput& out) {
  net::Writer w;
  w.put<uint64_t>(out.scheduled.size());
  for (const core::ScheduledRequest& s : out.scheduled) {
    w.put(std::string_view(s.request_id)).put<uint8_t>(static_cast<uint8_t>(s.kind));
    w.put<int32_t>(s.num_computed_tokens).put<int32_t>(s.num_scheduled_tokens).put(s.token_ids);
    put_tables(w, s.block_ids);
    put_tables(w, s.new_block_ids);
    w.put(s.num_null_blocks).put<uint8_t>(s.sample);
  }
  w.put<int32_t>(out.total_num_scheduled_tokens);
  put_strings(w, out.preempted_req_ids);
  put_strings(w, out.finished_req_ids);
  return w.str();
}

core::SchedulerOutput decode_step(const std::string& payload) {
  net::Reader r(payload);
  core::SchedulerOutput out;
  const uint64_t n = r.get<uint64_t>();
  VLLM_CHECK(n <= payload.size(), "a step of ", n, " requests in ", payload.size(), " bytes");
  for (uint64_t i = 0; i < n; ++i) {
    core::ScheduledRequest& s = out.scheduled.emplace_back();
    s.request_id = r.get_string();
    const uint8_t kind = r.get<uint8_t>();
    VLLM_CHECK(kind <= static_cast<uint8_t>(core::ScheduledKind::kRunning), "a step kind ",
               int(kind));
    s.kind = static_cast<core::ScheduledKind>(kind);
    s.num_computed_tokens = r.get<int32_t>();
    s.num_scheduled_tokens = r.get<int32_t>();
    s.token_ids = r.get_vector<int>();
    s.block_ids = get_tables(r);
    s.new_block_ids = get_tables(r);
    s.num_null_blocks = r.get_vector<int>();
    s.sample = r.get<uint8_t>() != 0;
  }
  out.total_num_scheduled_tokens = r.get<int32_t>();
  out.preempted_req_ids = get_strings(r);
  out.finished_req_ids = get_strings(r);
  VLLM_CHECK(r.done(), "a step message with bytes after its end");
  return out;
}

RemoteRanks::RemoteRanks(NodeGroup& group, const std::vector<const DecoderModel*>& local)
    : group_(group), local_(communicators_of(local)) {
  VLLM_CHECK(group_.head(), "RemoteRanks runs on node 0");
  // A node that failed, or is gone, may leave this node's ranks waiting in a collective: abort
  // them here, on the reader thread, and tell the other nodes to do the same.
  for (auto& peer : group_.peers())
    peer->set_watch([this, name = peer->name()](const net::Message* m) {
      const bool failed = !m || (m->tag == kStepDone && !m->payload.empty() &&
                                 uint8_t(m->payload[0]) == kFailed) ||
                          (m->tag == kBudget && !m->payload.empty() && m->payload[0] == 0);
      if (!failed) return;
      abort_all(local_);
      broadcast(kAbort);
      std::lock_guard lock(mutex_);
      if (failure_.empty())
        failure_ = "tensor-parallel " + name + (m ? " failed" : " is gone");
    });
}

RemoteRanks::~RemoteRanks() {
  for (auto& p : group_.peers()) p->set_watch({});
  broadcast(kBye);
}

// A node that is gone misses the message: its reader thread has seen the connection end, and
// the next step's end reports it.
void RemoteRanks::broadcast(uint32_t tag, std::string_view payload) {
  for (auto& p : group_.peers()) try {
      p->send(tag, payload);
    } catch (const net::ConnectionClosed&) {
    }
}

void RemoteRanks::begin_profile(const EngineConfig& c) {
  net::Writer w;
  w.put<int32_t>(c.max_num_batched_tokens).put<int32_t>(c.max_num_seqs);
  w.put<int32_t>(c.max_model_len).put<int32_t>(c.block_size).put(c.gpu_memory_utilization);
  broadcast(kProfile, w.str());
}

std::vector<KvBudget> RemoteRanks::end_profile() {
  std::vector<KvBudget> out;
  for (auto& p : group_.peers()) {
    const net::Message m = p->receive(kBudget);
    net::Reader r(m.payload);
    const bool ok = r.get<uint8_t>() != 0;
    KvBudget b;
    b.bytes = r.get<int64_t>();
    b.memory = r.get_string();
    if (!ok) throw Error(b.memory);
    out.push_back(std::move(b));
  }
  return out;
}

void RemoteRanks::start(int num_blocks, int block_size) {
  net::Writer w;
  w.put<int32_t>(num_blocks).put<int32_t>(block_size);
  broadcast(kStart, w.str());
}

void RemoteRanks::add_request(const std::string& id, const RunnerRequest& request) {
  // The other nodes' ranks only compute: they need the prompt's length and whether its logits
  // rows are wanted (prompt_logprobs), which shape the step; node 0 samples.
  net::Writer w;
  w.put(std::string_view(id)).put(request.prompt);
  w.put<uint8_t>(request.params.prompt_logprobs.has_value())
      .put<int32_t>(request.params.prompt_logprobs.value_or(0))
      .put(request.seed);
  broadcast(kAdd, w.str());
}

void RemoteRanks::remove_request(const std::string& id) {
  broadcast(kRemove, id);
}

void RemoteRanks::begin_step(const core::SchedulerOutput& out) {
  const std::string step = encode_step(out);
  broadcast(kStep, step);
}

std::exception_ptr RemoteRanks::end_step() {
  std::exception_ptr failed, lost, aborted;
  for (auto& p : group_.peers()) {
    try {
      const net::Message m = p->receive(kStepDone);
      net::Reader r(m.payload);
      const uint8_t outcome = r.get<uint8_t>();
      const std::string what = r.get_string();
      if (outcome == kFailed && !failed) failed = std::make_exception_ptr(Error(what));
      if (outcome == kAborted && !aborted) aborted = std::make_exception_ptr(CollectiveAborted());
    } catch (const std::exception& e) {
      if (!lost) lost = std::make_exception_ptr(Error(std::string("tensor-parallel ") + e.what()));
    }
  }
  return failed ? failed : lost ? lost : aborted;
}

void RemoteRanks::abort() { broadcast(kAbort); }

std::string RemoteRanks::failure() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

NodeSettings node_settings(const NodeFlags& f) {
  // The model by content, not by path (each host has its own copy): a directory's
  // config.json, a GGUF file's size and first MiB (its header and metadata).
  std::string id;
  const std::filesystem::path p(f.model_path);
  std::ifstream in(std::filesystem::is_directory(p) ? p / "config.json" : p, std::ios::binary);
  if (!in) throw Error(f.model_path + ": cannot read the model");
  std::string head(size_t(1) << 20, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  head.resize(size_t(in.gcount()));
  id = std::to_string(std::hash<std::string>{}(head));
  if (!std::filesystem::is_directory(p))
    id = std::to_string(std::filesystem::file_size(p)) + " bytes, " + id;
  return {{"the model (" + p.filename().string() + ")", id},
          {"vllm-cpp", VLLM_VERSION},
          {"--device", f.device.kind == DeviceKind::Cuda ? "cuda" : "cpu"},
          {"--dtype", f.dtype ? std::string(dtype_name(*f.dtype)) : "auto"},
          {"--quantization", f.quantization.empty() ? "none" : f.quantization},
          {"--kv-cache-dtype", f.kv_cache_dtype},
          {"--enforce-eager", f.enforce_eager ? "on" : "off"},
          {"--max-model-len", std::to_string(f.max_model_len)}};
}

int run_worker_node(NodeGroup& group, const std::vector<const DecoderModel*>& ranks) {
  VLLM_CHECK(!group.head() && group.peers().size() == 1, "run_worker_node on node 0");
  Peer& head = *group.peers()[0];
  const std::vector<Communicator*> comms = communicators_of(ranks);
  head.set_watch([&comms](const net::Message* m) {
    if (!m || m->tag == kAbort) abort_all(comms);
  });
  struct Unwatch {
    Peer& peer;
    ~Unwatch() { peer.set_watch({}); }  // before `comms` and the ranks go
  } unwatch{head};
  const std::string me = group.node_name(group.node_rank());
  std::fprintf(stderr, "%s: joined the tensor-parallel group of %s; running its steps\n",
               me.c_str(), head.name().c_str());
  std::unique_ptr<Executor> executor;
  std::string failure;  // the first error of the group, as this node saw it
  try {
    for (;;) {
      const net::Message m = head.receive();
      net::Reader r(m.payload);
      switch (m.tag) {
        case kProfile: {
          EngineConfig c;
          c.max_num_batched_tokens = r.get<int32_t>();
          c.max_num_seqs = r.get<int32_t>();
          c.max_model_len = r.get<int32_t>();
          c.block_size = r.get<int32_t>();
          c.gpu_memory_utilization = r.get<double>();
          net::Writer w;
          try {
            const KvBudget b = profile_kv_budget(c, ranks);
            w.put<uint8_t>(1).put(b.bytes).put(std::string_view(me + ": " + b.memory));
          } catch (const std::exception& e) {
            failure = me + " failed in its profile run: " + e.what();
            abort_all(comms);
            w.put<uint8_t>(0).put<int64_t>(0).put(std::string_view(failure));
          }
          head.send(kBudget, w.str());
          break;
        }
        case kStart: {
          const int num_blocks = r.get<int32_t>();
          const int block_size = r.get<int32_t>();
          executor = std::make_unique<Executor>(ranks, num_blocks, block_size);
          break;
        }
        case kAdd: {
          VLLM_CHECK(executor, "a request before the engine started");
          const std::string id = r.get_string();
          RunnerRequest q;
          q.prompt = r.get_vector<int32_t>();
          const bool has = r.get<uint8_t>() != 0;
          const int32_t n = r.get<int32_t>();
          if (has) q.params.prompt_logprobs = n;
          q.params.temperature = 0;  // samples here are discarded: the cheapest kind
          q.seed = r.get<uint64_t>();
          executor->add_request(id, q);
          break;
        }
        case kRemove:
          VLLM_CHECK(executor, "a request before the engine started");
          executor->remove_request(m.payload);
          break;
        case kStep: {
          VLLM_CHECK(executor, "a step before the engine started");
          const core::SchedulerOutput out = decode_step(m.payload);
          uint8_t outcome = kRan;
          std::string what;
          try {
            executor->execute(out);
          } catch (const std::exception& e) {
            outcome = is_collective_abort(std::current_exception()) ? kAborted : kFailed;
            what = e.what();
            if (failure.empty()) failure = what;
          }
          net::Writer w;
          w.put(outcome).put(std::string_view(what));
          head.send(kStepDone, w.str());
          break;
        }
        case kAbort:  // the watch has aborted the collectives
          if (failure.empty()) failure = "node 0 ended the group after a failure";
          break;
        case kBye:
          if (!failure.empty()) std::fprintf(stderr, "%s: %s\n", me.c_str(), failure.c_str());
          return failure.empty() ? 0 : 1;
        default:
          throw Error(head.name() + " sent message " + std::to_string(m.tag));
      }
    }
  } catch (const std::exception& e) {
    abort_all(comms);
    std::fprintf(stderr, "%s: %s\n", me.c_str(), e.what());
    return 1;
  }
}

}  // namespace vllm
