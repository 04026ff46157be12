// libfabric plumbing for the fabric transport: see fabric.hpp.
#include "transport/fabric.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <signal.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "nvst/error.hpp"
#include "base/bootstrap.hpp"
#include "base/job_secret.hpp"
#include "nvst/settings.hpp"
#include "nvst/topology.hpp"

// libfabric calls return 0 or a negative error code.
#define NVST_CHECK_FI(call) \
  do { \
    int nvst_rc_ = static_cast<int>(call); \
    if (nvst_rc_ != 0) NVST_FAIL(#call, " failed: ", fi_strerror(-nvst_rc_), " (", nvst_rc_, ")"); \
  } while (0)

namespace nvst::fabric {

namespace {

// Stale shm regions of this process's pid, which make shm's fi_enable
// fail (EBUSY), as one string ("" when none, or not shm).
std::string shm_regions_of_this_pid(const std::string& provider) {
  if (provider != "shm") return {};
  std::string found;
  for (const std::string& p : shm_region_paths(::getpid())) found += " " + p;
  return found;
}

constexpr std::uint32_t kApi = FI_VERSION(1, 17);

static_assert(sizeof(ProviderContext) >= sizeof(fi_context2), "ProviderContext must hold a fi_context2");

struct InfoDeleter {
  void operator()(fi_info* p) const { fi_freeinfo(p); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoDeleter>;

// What a transport asks of a provider: reliable datagram endpoints with RMA
// writes, delivery completion, 4 bytes of remote CQ data
// (write_with_data) without a posted receive per write (no FI_RX_CQ_DATA
// mode), and whichever memory registration modes the provider needs (we
// handle them all).
InfoPtr hints(const std::string& provider) {
  InfoPtr h(fi_allocinfo());
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE;  // writes only: signals travel as inbox pieces (proxy.cpp)
  h->mode = FI_CONTEXT | FI_CONTEXT2;             // we give the provider 64 bytes per operation
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  h->domain_attr->threading = FI_THREAD_DOMAIN;  // one proxy thread per PE drives it
  h->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  h->domain_attr->cq_data_size = 4;
  if (!provider.empty()) h->fabric_attr->prov_name = ::strdup(provider.c_str());
  return h;
}

// Where a socket-based provider's endpoint listens: the IPv4 address of
// NVST_FABRIC_IFACE; else loopback when every PE runs on this host (a
// stranger elsewhere cannot reach it at all); else "" (the provider's
// choice). Collective (one allgather). Other providers (shm, verbs, efa)
// have no such choice here: "".
std::string bind_address(Bootstrap& boot, const std::string& provider) {
  const bool sockets = provider.rfind("tcp", 0) == 0 || provider.rfind("sockets", 0) == 0;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot_id);
  const std::uint64_t mine = secret::derive(secret::Cookie{}, std::string(host) + "|" + boot_id);
  const std::vector<std::byte> all = boot.allgather(&mine, sizeof(mine), "fabric: hosts");
  bool one_host = true;
  for (int p = 0; p < boot.world(); ++p) {
    std::uint64_t theirs;
    std::memcpy(&theirs, all.data() + sizeof(theirs) * static_cast<std::size_t>(p), sizeof(theirs));
    one_host = one_host && theirs == mine;
  }
  const auto iface = settings::get("NVST_FABRIC_IFACE");
  if (!sockets) return {};
  if (!iface) return one_host ? "127.0.0.1" : "";
  ifaddrs* list = nullptr;
  NVST_CHECK_SYS(::getifaddrs(&list));
  std::string found, names;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    names += std::string(names.empty() ? "" : ", ") + i->ifa_name;
    if (*iface == i->ifa_name && found.empty()) {
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof(text));
      found = text;
    }
  }
  ::freeifaddrs(list);
  NVST_REQUIRE(!found.empty(), "NVST_FABRIC_IFACE='", *iface, "' is not an interface with an IPv4 address here (",
               names.empty() ? "none" : names, ")");
  return found;
}

}  // namespace

std::vector<std::string> providers_present() {
  InfoPtr h(fi_allocinfo());
  h->ep_attr->type = FI_EP_RDM;
  fi_info* all = nullptr;
  std::set<std::string> names;
  if (fi_getinfo(kApi, nullptr, nullptr, 0, h.get(), &all) == 0) {
    for (fi_info* i = all; i; i = i->next) names.insert(i->fabric_attr->prov_name);
    fi_freeinfo(all);
  }
  return {names.begin(), names.end()};
}

std::vector<std::string> shm_region_paths(int pid) {
  const std::string prefix = std::to_string(pid) + ":";
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) found.push_back(e.path().string());
  return found;
}

namespace {
// Whether process `pid` has ended (gone, or a zombie not yet reaped).
bool process_gone(int pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && (line[close + 2] == 'Z' || line[close + 2] == 'X');
}
}  // namespace

int remove_stale_shm_regions() {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    const auto colon = name.find(':');
    if (colon == 0 || colon == std::string::npos || name.find_first_not_of("0123456789") != colon) continue;
    struct stat st{};
    if (::lstat(e.path().c_str(), &st) != 0 || st.st_uid != ::getuid()) continue;
    if (!process_gone(std::stoi(name.substr(0, colon)))) continue;
    removed += std::filesystem::remove(e.path(), ec) ? 1 : 0;
  }
  return removed;
}

std::string chosen_provider() {
  if (auto p = settings::get("NVST_FABRIC_PROVIDER")) return *p;
  auto present = providers_present();
  for (const char* want : {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"})
    if (std::find(present.begin(), present.end(), want) != present.end()) return want;
  return present.empty() ? "tcp;ofi_rxm" : present.front();
}

// What each PE publishes about itself.
struct PeerAddress {
  std::uint64_t heap_base;  // virtual address (for FI_MR_VIRT_ADDR providers)
  std::uint64_t heap_key;
  std::uint64_t control_base;
  std::uint64_t control_key;
  std::uint32_t name_len;
  std::uint8_t name[240];
};

struct Transport::Impl {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* heap_mr = nullptr;
  fid_mr* control_mr = nullptr;
  fid_mr* scratch_mr = nullptr;
  char* heap = nullptr;
  std::size_t heap_bytes = 0;
  char* control = nullptr;
  std::size_t control_bytes = 0;
  char* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  bool virt_addr = false;
  bool mr_local = true;            // FI_MR_LOCAL: local sources must be registered
  std::vector<fi_addr_t> addr;     // per PE
  std::vector<PeerAddress> peers;  // per PE

  void* desc_for(const void* p, std::size_t bytes) const {
    auto* c = static_cast<const char*>(p);
    if (heap_mr && c >= heap && c + bytes <= heap + heap_bytes) return fi_mr_desc(heap_mr);
    if (c >= scratch && c + bytes <= scratch + scratch_bytes) return fi_mr_desc(scratch_mr);
    if (!mr_local) return nullptr;  // the provider reads any memory of ours
    NVST_FAIL("fabric: source ", p, " (+", bytes, ") is neither in the heap nor in the staging area");
  }
  std::uint64_t remote_addr(int pe, Region r, std::uint64_t offset) const {
    const auto& peer = peers[static_cast<std::size_t>(pe)];
    if (!virt_addr) return offset;
    return (r == Region::kHeap ? peer.heap_base : peer.control_base) + offset;
  }
  std::uint64_t remote_key(int pe, Region r) const {
    const auto& peer = peers[static_cast<std::size_t>(pe)];
    return r == Region::kHeap ? peer.heap_key : peer.control_key;
  }

  fid_mr* reg(char* base, std::size_t bytes, std::uint64_t access, std::uint64_t key) {
    fid_mr* mr = nullptr;
    NVST_CHECK_FI(fi_mr_reg(domain, base, bytes, access, 0, key, 0, &mr, nullptr));
    if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
      NVST_CHECK_FI(fi_mr_bind(mr, &ep->fid, 0));
      NVST_CHECK_FI(fi_mr_enable(mr));
    }
    return mr;
  }

  ~Impl() {
    if (scratch_mr) fi_close(&scratch_mr->fid);
    if (control_mr) fi_close(&control_mr->fid);
    if (heap_mr) fi_close(&heap_mr->fid);
    if (ep) fi_close(&ep->fid);
    if (av) fi_close(&av->fid);
    if (cq) fi_close(&cq->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }
};

Transport::Transport(Bootstrap& boot, char* heap, std::size_t heap_bytes, char* control, std::size_t control_bytes,
                     char* scratch, std::size_t scratch_bytes, int near_device)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.heap = heap;
  m.heap_bytes = heap_bytes;
  m.control = control;
  m.control_bytes = control_bytes;
  m.scratch = scratch;
  m.scratch_bytes = scratch_bytes;
  provider_ = chosen_provider();
  InfoPtr h = hints(provider_);
  const std::string bind = bind_address(boot, provider_);
  int rc =
      fi_getinfo(kApi, bind.empty() ? nullptr : bind.c_str(), nullptr, bind.empty() ? 0 : FI_SOURCE, h.get(), &m.info);
  if (rc != 0 || m.info == nullptr) {
    std::string present;
    for (auto& p : providers_present()) present += (present.empty() ? "" : ", ") + p;
    NVST_FAIL("fabric provider '", provider_, "' is not available with RDM endpoints, RMA writes and remote CQ data (",
              fi_strerror(-rc), "); providers present: ", present.empty() ? "none" : present,
              " (set NVST_FABRIC_PROVIDER)");
  }
  // Several domains (one per NIC): the one nearest this PE's GPU.
  std::vector<fi_info*> candidates;
  std::vector<std::string> names;
  for (fi_info* i = m.info; i; i = i->next) {
    candidates.push_back(i);
    names.emplace_back(i->domain_attr->name ? i->domain_attr->name : "");
  }
  const int pick = near_device >= 0 ? topology::nearest_network(near_device, names) : 0;
  if (pick != 0) {
    fi_info* chosen = fi_dupinfo(candidates[static_cast<std::size_t>(pick)]);
    fi_freeinfo(m.info);
    m.info = chosen;
  }
  domain_ = m.info->domain_attr->name ? m.info->domain_attr->name : "";
  hmem_ = (m.info->caps & FI_HMEM) != 0;
  m.virt_addr = (m.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0;
  max_write_ = std::min<std::size_t>(m.info->ep_attr->max_msg_size, std::size_t{1} << 30);
  inject_limit_ = m.info->tx_attr->inject_size;
  m.mr_local = (m.info->domain_attr->mr_mode & FI_MR_LOCAL) != 0;
  any_source_ = !m.mr_local;

  NVST_CHECK_FI(fi_fabric(m.info->fabric_attr, &m.fabric, nullptr));
  NVST_CHECK_FI(fi_domain(m.fabric, m.info, &m.domain, nullptr));
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_DATA;  // peers' write_with_data() arrive with their data
  cq_attr.size = kMaxLocalInFlight + kMaxRemoteDataPerPeer * static_cast<std::size_t>(boot.world()) + 256;
  // A wait fd lets an idle proxy block until the provider has work
  // (transport/wakeup.hpp). Only where it reflects the peers' sockets
  // (ofi_rxm over a message provider); shm reports nothing through one.
  if (provider_.find("ofi_rxm") != std::string::npos) {
    cq_attr.wait_obj = FI_WAIT_FD;
    if (fi_cq_open(m.domain, &cq_attr, &m.cq, nullptr) == 0 && fi_control(&m.cq->fid, FI_GETWAIT, &wait_fd_) != 0) {
      fi_close(&m.cq->fid);
      m.cq = nullptr;
    }
    if (m.cq == nullptr) wait_fd_ = -1;
  }
  cq_attr.wait_obj = FI_WAIT_NONE;
  if (m.cq == nullptr) NVST_CHECK_FI(fi_cq_open(m.domain, &cq_attr, &m.cq, nullptr));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  NVST_CHECK_FI(fi_av_open(m.domain, &av_attr, &m.av, nullptr));
  // A stale shm region name (see shm_regions_of_this_pid): shm's fi_enable
  // fails with EBUSY and removes the name as it does, so a second endpoint
  // works. Listed first: after the failure the names are gone.
  if (provider_ == "shm") remove_stale_shm_regions();  // left by killed processes of this user
  const std::string stale = shm_regions_of_this_pid(provider_);
  for (bool retried = false;;) {
    NVST_CHECK_FI(fi_endpoint(m.domain, m.info, &m.ep, nullptr));
    NVST_CHECK_FI(fi_ep_bind(m.ep, &m.cq->fid, FI_TRANSMIT | FI_RECV));
    NVST_CHECK_FI(fi_ep_bind(m.ep, &m.av->fid, 0));
    const int rc = fi_enable(m.ep);
    if (rc == 0) break;
    fi_close(&m.ep->fid);
    m.ep = nullptr;
    if (rc == -FI_EBUSY && !stale.empty() && !retried) {
      std::fprintf(stderr,
                   "%sfabric: /dev/shm held region names of this pid from a killed process (%s); shm "
                   "removed them, opening the endpoint again\n",
                   detail::rank_prefix().c_str(), stale.c_str() + 1);
      retried = true;
      continue;
    }
    NVST_FAIL("fi_enable failed: ", fi_strerror(-rc), " (", rc, ")",
              stale.empty() ? "" : "; /dev/shm held this pid's shm region names before:" + stale);
  }

  // Keys, where the provider lets us choose them (tcp and shm do, with
  // mr_mode 0 and offsets for addresses): pseudo-random per job and PE,
  // derived from the job's secret, so a process that reaches our endpoint
  // cannot name our memory; a write with a guessed key is refused by the
  // provider. Providers that choose keys themselves (FI_MR_PROV_KEY) are
  // asked for nothing.
  const std::size_t key_bytes = m.info->domain_attr->mr_key_size;
  auto key = [&](const char* region) {
    std::uint64_t k = secret::derive(boot.cookie(), detail::concat("fabric key|", region, "|", boot.rank()));
    if (key_bytes > 0 && key_bytes < 8) k &= (std::uint64_t{1} << (8 * key_bytes)) - 1;
    return k | 1;  // never 0
  };
  const std::uint64_t remote = FI_REMOTE_WRITE | FI_REMOTE_READ | FI_WRITE | FI_READ;
  if (heap) m.heap_mr = m.reg(heap, heap_bytes, remote, key("heap"));
  m.scratch_mr = m.reg(scratch, scratch_bytes, FI_WRITE | FI_READ, key("scratch"));
  m.control_mr = m.reg(control, control_bytes, remote, key("control"));

  PeerAddress mine{};
  mine.heap_base = reinterpret_cast<std::uint64_t>(heap);
  mine.heap_key = m.heap_mr ? fi_mr_key(m.heap_mr) : 0;
  mine.control_base = reinterpret_cast<std::uint64_t>(control);
  mine.control_key = fi_mr_key(m.control_mr);
  std::size_t len = sizeof(mine.name);
  NVST_CHECK_FI(fi_getname(&m.ep->fid, mine.name, &len));
  mine.name_len = static_cast<std::uint32_t>(len);
  auto all = boot.allgather(&mine, sizeof(mine), "fabric: endpoint addresses");
  const int world = boot.world();
  m.peers.resize(static_cast<std::size_t>(world));
  std::memcpy(m.peers.data(), all.data(), all.size());
  m.addr.resize(static_cast<std::size_t>(world));
  for (int p = 0; p < world; ++p) {
    int n = fi_av_insert(m.av, m.peers[static_cast<std::size_t>(p)].name, 1, &m.addr[static_cast<std::size_t>(p)], 0,
                         nullptr);
    NVST_REQUIRE(n == 1, "fi_av_insert of PE ", p, "'s address failed (", n, ")");
  }
}

Transport::~Transport() = default;

std::uint64_t Transport::key(int pe, Region region) const {
  NVST_REQUIRE(pe >= 0 && pe < static_cast<int>(impl_->peers.size()), "fabric: PE ", pe, " out of range");
  return impl_->remote_key(pe, region);
}

std::vector<std::uint8_t> Transport::address(int pe) const {
  const PeerAddress& a = impl_->peers.at(static_cast<std::size_t>(pe));
  return {a.name, a.name + a.name_len};
}

bool Transport::write(int pe, const void* src, std::size_t bytes, Region region, std::uint64_t dest_offset,
                      void* context) {
  Impl& m = *impl_;
  CallWatch::Mark mark(provider_call_, "fi_write", pe);
  ssize_t rc = fi_write(m.ep, src, bytes, m.desc_for(src, bytes), m.addr[static_cast<std::size_t>(pe)],
                        m.remote_addr(pe, region, dest_offset), m.remote_key(pe, region), context);
  if (rc == -FI_EAGAIN) return ++refused_, false;
  NVST_REQUIRE(rc == 0, "fi_write of ", bytes, " bytes to PE ", pe, " failed: ", fi_strerror(static_cast<int>(-rc)));
  return true;
}

bool Transport::write_with_data(int pe, const void* src, std::size_t bytes, Region region, std::uint64_t dest_offset,
                                std::uint32_t data, void* context) {
  Impl& m = *impl_;
  CallWatch::Mark mark(provider_call_, "fi_writedata", pe);
  iovec iov{const_cast<void*>(src), bytes};
  void* desc = m.desc_for(src, bytes);
  fi_rma_iov rma{m.remote_addr(pe, region, dest_offset), bytes, m.remote_key(pe, region)};
  fi_msg_rma msg{};
  msg.msg_iov = &iov;
  msg.desc = &desc;
  msg.iov_count = 1;
  msg.addr = m.addr[static_cast<std::size_t>(pe)];
  msg.rma_iov = &rma;
  msg.rma_iov_count = 1;
  msg.context = context;
  msg.data = data;
  // FI_TRANSMIT_COMPLETE: the slot may be reused once the bytes left.
  // (tcp answers it like FI_DELIVERY_COMPLETE. With no completion level it
  // sends no answer but reports the completion inside the post, and a
  // one-way signal took 44 us instead of 34 on our 2-core VM.)
  ssize_t rc = fi_writemsg(m.ep, &msg, FI_COMPLETION | FI_REMOTE_CQ_DATA | FI_TRANSMIT_COMPLETE);
  if (rc == -FI_EAGAIN) return ++refused_, false;
  NVST_REQUIRE(rc == 0, "fi_writedata of ", bytes, " bytes to PE ", pe,
               " failed: ", fi_strerror(static_cast<int>(-rc)));
  return true;
}

bool Transport::write_inject(int pe, const void* src, std::size_t bytes, Region region, std::uint64_t dest_offset) {
  Impl& m = *impl_;
  NVST_REQUIRE(bytes <= inject_limit_, "fabric: an inject write of ", bytes, " bytes; the provider takes at most ",
               inject_limit_);
  CallWatch::Mark mark(provider_call_, "fi_inject_write", pe);
  ssize_t rc = fi_inject_write(m.ep, src, bytes, m.addr[static_cast<std::size_t>(pe)],
                               m.remote_addr(pe, region, dest_offset), m.remote_key(pe, region));
  if (rc == -FI_EAGAIN) return ++refused_, false;
  NVST_REQUIRE(rc == 0, "fi_inject_write of ", bytes, " bytes to PE ", pe,
               " failed: ", fi_strerror(static_cast<int>(-rc)));
  return true;
}

bool Transport::may_block() {
  if (wait_fd_ < 0) return false;
  Impl& m = *impl_;
  CallWatch::Mark mark(provider_call_, "fi_trywait");
  fid* fids[1] = {&m.cq->fid};
  return fi_trywait(m.fabric, fids, 1) == FI_SUCCESS;
}

int Transport::progress(std::vector<Completion>& out) {
  Impl& m = *impl_;
  CallWatch::Mark mark(provider_call_, "fi_cq_read (the provider's progress)");
  fi_cq_data_entry entries[32];
  int n = 0;
  for (;;) {
    ssize_t got = fi_cq_read(m.cq, entries, 32);
    if (got > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        const fi_cq_data_entry& e = entries[i];
        if (e.flags & FI_REMOTE_CQ_DATA)
          out.push_back({nullptr, 0, {}, true, static_cast<std::uint32_t>(e.data)});
        else
          out.push_back({e.op_context, 0, {}});
      }
      n += static_cast<int>(got);
      continue;
    }
    if (got == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(m.cq, &err, 0) > 0) {
        char buf[256] = {};
        const char* text = fi_cq_strerror(m.cq, err.prov_errno, err.err_data, buf, sizeof buf);
        out.push_back({err.op_context, err.err ? err.err : FI_EIO,
                       std::string(fi_strerror(err.err)) + (text ? std::string(": ") + text : ""),
                       (err.flags & FI_REMOTE_CQ_DATA) != 0, static_cast<std::uint32_t>(err.data)});
        ++n;
        continue;
      }
    }
    if (got != -FI_EAGAIN && got < 0) NVST_FAIL("fi_cq_read failed: ", fi_strerror(static_cast<int>(-got)));
    return n;
  }
}

}  // namespace nvst::fabric
