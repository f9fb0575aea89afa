#include "core/request.h"

namespace vllm::core {

const char* finish_reason(RequestStatus s) {
  switch (s) {
    case RequestStatus::kFinishedStopped: return "stop";
    case RequestStatus::kFinishedLength: return "length";
    case RequestStatus::kFinishedAborted: return "abort";
    case RequestStatus::kFinishedError: return "error";
    default: return nullptr;
  }
}

const char* to_string(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting: return "WAITING";
    case RequestStatus::kRunning: return "RUNNING";
    case RequestStatus::kPreempted: return "PREEMPTED";
    case RequestStatus::kFinishedStopped: return "FINISHED_STOPPED";
    case RequestStatus::kFinishedLength: return "FINISHED_LENGTH_CAPPED";
    case RequestStatus::kFinishedAborted: return "FINISHED_ABORTED";
    case RequestStatus::kFinishedError: return "FINISHED_ERROR";
  }
  return "?";
}

}  // namespace vllm::core
