// The UCX plugin's status type: the shared plugin status (comm/plugin_status.h).
#ifndef TPX_COMM_UCX_STATUS_H_
#define TPX_COMM_UCX_STATUS_H_

#include "comm/plugin_status.h"

namespace tpx::ucx {
using Status = ::tpx::plugin::Status;
}  // namespace tpx::ucx

#endif  // TPX_COMM_UCX_STATUS_H_
