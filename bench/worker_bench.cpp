// worker_bench: the seed workload (guide.md) through the Eigen worker at 1 and 2 threads: seconds
// per epoch, samples/s, GFLOP/s of forward+backward, the optimizer's share, and memory (peak RSS
// against the bytes of the worker's state, RSS at the first and the last step). When
// python3-torch is importable it runs the same epochs in PyTorch (bench/torch_epoch.py, spawned
// with an argv vector), stock and with tuned malloc, and prints the ratios. It names the CPU and
// its vector ISA and measures the machine's own limits (bench/machine_peaks.h): fwd+bwd is shown
// as a share of the FMA peak on as many threads, the optimizer as the bandwidth it reaches over
// the bytes it must move, beside the triad's. Figures only: nothing
// asserts timing; `--quick` runs a few steps so a ctest smoke test keeps this code alive.
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_figures.h"
#include "machine_peaks.h"
#include "os/env.h"
#include "os/process.h"
#include "worker/dense_layer.h"
#include "worker/model.h"
#include "worker/optimizer.h"
#include "worker/parallel.h"
#include "worker/random.h"

namespace {

using baton::bench::median;

using namespace baton;
using namespace baton::worker;
using clock_type = std::chrono::steady_clock;

constexpr idx rows_total = 5000, features = 100, batch = 32, width = 2000;

struct options {
  int epochs = 3;
  bool quick = false;
  int quick_steps = 4;
  std::vector<int> threads{1, 2};
  bool torch = true;
  // Interpreters tried in order until one imports torch (a pyenv shim may shadow Debian's).
  std::vector<std::string> pythons{"python3", "/usr/bin/python3"};
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); nullopt where there is no /proc.
std::optional<double> proc_status_bytes(const char* field) {
  auto text = os::env::default_env().read_file("/proc/self/status");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return 1024.0 * std::strtod(line.c_str() + key.size(), nullptr);
  }
  return std::nullopt;
}

// Resets VmHWM to the current RSS (Linux clear_refs "5") so each run reports its own peak.
void reset_peak_rss() {
  auto f = os::env::default_env().new_writable_file("/proc/self/clear_refs");
  if (f) {
    (void)(*f)->append("5");
    (void)(*f)->close();
  }
}

std::string load_average() {
  auto text = os::env::default_env().read_file("/proc/loadavg");
  if (!text) return "n/a";
  return text->substr(0, text->find(' '));
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

protocol::model_spec seed_model() {
  protocol::model_spec s;
  s.layers = {{width, activation::relu}, {width, activation::relu}, {1, activation::sigmoid}};
  return s;
}

// Forward flops of the whole data set; backward counted as twice forward (the usual 3x rule).
double flops_per_epoch() {
  const double per_sample = 2.0 * (features * width + width * width + width * 1);
  return 3.0 * per_sample * rows_total;
}

struct figures {
  int threads = 0;
  std::vector<double> epoch_s;   // fused steps (model::train_step(x, y, opt))
  std::vector<double> fwdbwd_s;  // train_step alone, split from the optimizer
  std::vector<double> opt_s;     // optimizer::step alone
  double state_bytes = 0;
  double opt_bytes_per_step = 0;  // what the optimizer reads and writes, at least, each step
  std::optional<double> rss_first, rss_last, peak;
  std::optional<double> anon_first, anon_last;  // RssAnon: heap and stacks, without code pages
  double final_loss = NAN;
  bool finite = true;
};

figures run_worker(int threads, const options& o, const row_matrix<float>& x,
                   const row_matrix<float>& y) {
  figures f;
  f.threads = set_thread_count(threads);
  reset_peak_rss();
  {
    auto m =
        model<float>::create(seed_model(), features, loss_kind::binary_crossentropy, batch).value();
    m.init_glorot(7);
    auto opt = make_optimizer({}, m.parameters()).value();
    const idx steps = o.quick ? o.quick_steps : (rows_total + batch - 1) / batch;
    auto batch_x = [&](idx s) {
      const idx r0 = s * batch, n = std::min(batch, rows_total - r0);
      return const_matrix_map<float>(x.data() + r0 * features, n, features);
    };
    auto batch_y = [&](idx s) {
      const idx r0 = s * batch, n = std::min(batch, rows_total - r0);
      return const_matrix_map<float>(y.data() + r0, n, 1);
    };
    // The bytes a worker must hold: weights, gradients, optimizer state, data, layer buffers.
    for (auto& p : m.parameters()) f.state_bytes += 2.0 * p.value.size_bytes();
    for (auto& s : opt->state()) f.state_bytes += s.value.size_bytes();
    // Each weight read and written, its gradient read, each state array read and written.
    for (auto& p : m.parameters()) f.opt_bytes_per_step += 3.0 * p.value.size_bytes();
    for (auto& s : opt->state()) f.opt_bytes_per_step += 2.0 * s.value.size_bytes();
    f.state_bytes += (x.size() + y.size()) * sizeof(float);
    for (std::size_t i = 0; i < m.layer_count(); ++i) {
      f.state_bytes += 2.0 * m.max_batch() * m.layer(i).units() * sizeof(float);
    }

    // RSS after the first and the last step of every epoch: first and last sample are reported.
    auto sample_rss = [&](bool very_first) {
      const auto now = proc_status_bytes("VmRSS");
      const auto anon = proc_status_bytes("RssAnon");
      if (very_first) {
        f.rss_first = now;
        f.anon_first = anon;
      }
      f.rss_last = now;
      f.anon_last = anon;
    };
    auto fused_epoch = [&](bool first) {
      const auto t0 = clock_type::now();
      double loss = 0;
      for (idx s = 0; s < steps; ++s) {
        loss = m.train_step(batch_x(s), batch_y(s), *opt);
        if (s == 0 || s + 1 == steps) sample_rss(first && s == 0);
      }
      f.finite = f.finite && std::isfinite(loss);
      f.final_loss = loss;
      return seconds_since(t0);
    };
    fused_epoch(true);  // warm-up: first touch of every buffer, thread start-up
    const int epochs = o.quick ? 1 : o.epochs;
    for (int e = 0; e < epochs; ++e) f.epoch_s.push_back(fused_epoch(false));
    for (int e = 0; e < epochs; ++e) {
      double fb = 0, op = 0;
      for (idx s = 0; s < steps; ++s) {
        const auto t0 = clock_type::now();
        const double loss = m.train_step(batch_x(s), batch_y(s));
        const auto t1 = clock_type::now();
        opt->step();
        if (s == 0 || s + 1 == steps) {
          op += seconds_since(t1);  // keep the /proc read out of the timings
          sample_rss(false);
          fb += std::chrono::duration<double>(t1 - t0).count();
          f.finite = f.finite && std::isfinite(loss);
          continue;
        }
        fb += std::chrono::duration<double>(t1 - t0).count();
        op += seconds_since(t1);
        f.finite = f.finite && std::isfinite(loss);
      }
      f.fwdbwd_s.push_back(fb);
      f.opt_s.push_back(op);
    }
    f.peak = proc_status_bytes("VmHWM");
  }
  return f;
}

// The products' own rate, without the step's memory traffic: one width x width relu layer run
// over and over on one batch, so its kernel (16 MiB for the seed's width) stays in whatever
// cache holds it (a 32 MiB L3 does), the forward pass, then the backward pass into a sink that
// drops the blocks (as the fused step hands them to Adam), with dW alone and with dX too. Held
// against the step's own fwd+bwd rate, it tells the kernels' share of the gap to the FMA peak
// from the share of the memory traffic (weights and Adam's moments, which no cache holds).
struct phase_rates {
  double forward = 0, dw = 0, backward = 0;  // FLOP/s; backward: dW and dX
};

phase_rates hot_phases(int threads, bool quick) {
  set_thread_count(threads);
  dense_layer<float> l(width, width, activation::relu, batch, storage_fill::zeroed,
                       input_gradient::computed);
  rng r(3);
  for (idx i = 0; i < l.kernel().size(); ++i) {
    l.kernel().data()[i] = static_cast<float>(0.02 * r.normal());
  }
  row_matrix<float> x(batch, width), dx(batch, width);
  for (idx i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>(std::max(0.0, r.normal()));
  const const_matrix_map<float> xm(x.data(), batch, width);
  const int reps = quick ? 2 : 60;
  const double product = 2.0 * batch * width * width;  // one product's FLOP
  auto rate = [&](double flop_per_rep, auto&& body) {
    std::vector<double> runs;
    for (int k = 0; k < 5; ++k) {
      body();  // the first round of each run also warms the cache
      const auto t0 = clock_type::now();
      for (int i = 0; i < reps; ++i) body();
      runs.push_back(flop_per_rep * reps / seconds_since(t0));
    }
    return median(runs);
  };
  phase_rates p;
  p.forward = rate(product, [&] { l.forward(xm); });
  for (idx i = 0; i < batch * width; ++i) {
    l.output_grad_data()[i] = static_cast<float>(r.normal());
  }
  l.prepare_output_grad(true);
  const gradient_sink<float> drop{
      [](void*, std::size_t, std::int64_t, std::int64_t, const float*) {}, nullptr, 0, 1};
  std::vector<float> scratch(static_cast<std::size_t>(thread_count() * l.scratch_size()));
  auto backward = [&](bool with_dx) {
    run_team(static_cast<std::int64_t>(2 * product), [&](const team& t) {
      l.backward_team(xm, t, scratch.data() + t.id * l.scratch_size(), &drop, nullptr,
                      with_dx ? dx.data() : nullptr);
    });
  };
  p.dw = rate(product, [&] { backward(false); });
  p.backward = rate(2 * product, [&] { backward(true); });
  return p;
}

struct torch_result {
  bool available = false;
  std::string note;
  std::vector<double> epoch_s;
  std::string blas;  // the BLAS library torch loaded (reference BLAS makes torch ~10x slower)
};

// Runs bench/torch_epoch.py as a child (argv vector, no shell) and collects its "epoch" lines.
torch_result run_torch(const std::string& python, int threads, bool tuned, const options& o) {
  torch_result r;
  os::spawn_options so;
  so.argv = {python, std::string(BATON_BENCH_DIR) + "/torch_epoch.py", "--threads",
             std::to_string(threads)};
  if (o.quick) {
    so.argv.insert(so.argv.end(),
                   {"--epochs", "1", "--warmup", "0", "--steps", std::to_string(o.quick_steps)});
  } else {
    so.argv.insert(so.argv.end(), {"--epochs", std::to_string(o.epochs)});
  }
  if (tuned) {
    so.env = {{"MALLOC_MMAP_THRESHOLD_", "33554432"},
              {"MALLOC_TRIM_THRESHOLD_", "1073741824"},
              {"MALLOC_TOP_PAD_", "134217728"},
              {"OPENBLAS_NUM_THREADS", "1"}};
  }
  std::fflush(stdout);
  std::fflush(stderr);
  boost::asio::io_context io;
  auto p = os::spawn(io, so);
  if (!p) {
    r.note = "unavailable: " + p.error().message;
    return r;
  }
  std::vector<std::string> lines;
  bool read_done = false, exit_done = false;
  os::exit_status status;
  (*p)->async_read_lines([&](const boost::system::error_code& ec, std::string_view line) {
    if (!ec) {
      lines.emplace_back(line);
    } else if (ec != boost::system::errc::message_size) {
      read_done = true;
    }
  });
  (*p)->async_wait([&](const boost::system::error_code&, os::exit_status st) {
    status = st;
    exit_done = true;
  });
  while (!(read_done && exit_done)) {
    if (io.run_one() == 0) break;
  }
  for (const auto& l : lines) {
    if (l.rfind("epoch ", 0) == 0) r.epoch_s.push_back(std::strtod(l.c_str() + 6, nullptr));
    if (l.rfind("unavailable", 0) == 0) r.note = l;
    if (l.rfind("blas ", 0) == 0) r.blas = l.substr(5);
  }
  if (status.how == os::exit_status::kind::exited && status.code == 3) return r;  // no torch
  if (!status.success() || r.epoch_s.empty()) {
    r.note = "torch_epoch.py failed: " + status.describe();
    return r;
  }
  r.available = true;
  return r;
}

int usage(const char* self) {
  std::fprintf(stderr,
               "usage: %s [--epochs N (default 3)] [--threads 1,2] [--quick] [--no-torch] "
               "[--python python3]\n",
               self);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--no-torch") {
      o.torch = false;
    } else if (a == "--epochs" && has_value) {
      o.epochs = std::atoi(argv[++i]);
      if (o.epochs <= 0) return usage(argv[0]);
    } else if (a == "--python" && has_value) {
      o.pythons = {argv[++i]};
    } else if (a == "--threads" && has_value) {
      o.threads.clear();
      std::istringstream in(argv[++i]);
      std::string t;
      while (std::getline(in, t, ',')) o.threads.push_back(std::atoi(t.c_str()));
      if (o.threads.empty() || *std::min_element(o.threads.begin(), o.threads.end()) <= 0) {
        return usage(argv[0]);
      }
    } else {
      return usage(argv[0]);
    }
  }

  // The seed data: X ~ N(0, 1), y = (row sum > 0).
  row_matrix<float> x(rows_total, features), y(rows_total, 1);
  rng r(1);
  for (idx i = 0; i < rows_total; ++i) {
    for (idx j = 0; j < features; ++j) x(i, j) = static_cast<float>(r.normal());
    y(i, 0) = x.row(i).sum() > 0 ? 1.0f : 0.0f;
  }
  const double gflop = flops_per_epoch() / 1e9;
  std::printf(
      "worker_bench: X %lldx%lld, Dense(%lld relu) -> Dense(%lld relu) -> Dense(1 sigmoid), BCE "
      "from logits, Adam, batch %lld: %lld steps, %.2f GFLOP per epoch%s\n",
      static_cast<long long>(rows_total), static_cast<long long>(features),
      static_cast<long long>(width), static_cast<long long>(width), static_cast<long long>(batch),
      static_cast<long long>((rows_total + batch - 1) / batch), gflop,
      o.quick ? " (--quick: a few steps, figures meaningless)" : "");
  std::printf("load average (1 min) at start: %s; medians of %d epochs after 1 warm-up epoch\n",
              load_average().c_str(), o.quick ? 1 : o.epochs);
  std::printf("CPU: %s; %s\n", baton::bench::cpu_model().c_str(),
              baton::bench::vector_isa().c_str());
  // The machine's own limits, measured now, per thread count.
  std::map<int, double> fma_peak, triad;
  for (int t : o.threads) {
    fma_peak[t] = baton::bench::fma_peak_flops(t, o.quick ? 0.03 : 0.6);
    triad[t] = baton::bench::stream_triad_bytes_per_second(t, o.quick ? 1 : 5);
    std::printf("%d thread%s: FMA peak %.1f GFLOP/s (fp32), triad %.1f GB/s\n", t,
                t == 1 ? "" : "s", fma_peak[t] / 1e9, triad[t] / 1e9);
  }
  const double epoch_fraction =
      o.quick ? static_cast<double>(o.quick_steps * batch) / rows_total : 1.0;

  std::vector<figures> runs;
  bool ok = true;
  std::printf("%-7s %9s %10s %13s %6s %12s %10s %12s %10s %9s %6s %21s %19s\n", "threads",
              "s/epoch", "samples/s", "fwd+bwd GF/s", "%peak", "opt s/epoch", "opt GB/s",
              "fwd+bwd s", "state MiB", "peak MiB", "ratio", "RSS MiB first->last",
              "anon first->last");
  for (int t : o.threads) {
    figures f = run_worker(t, o, x, y);
    ok = ok && f.finite;
    const double ep = median(f.epoch_s), fb = median(f.fwdbwd_s), op = median(f.opt_s);
    const double steps = o.quick ? o.quick_steps : (rows_total + batch - 1) / batch;
    const double opt_bytes_per_s = f.opt_bytes_per_step * steps / op;
    const double fwdbwd_flops = gflop * 1e9 * epoch_fraction / fb;
    std::printf(
        "%-7d %9.3f %10.0f %13.1f %5.0f%% %12.3f %10.2f %12.3f %10.1f %9.1f %6.2f "
        "%10.1f->%-10.1f %8.1f->%-8.1f\n",
        f.threads, ep, rows_total * epoch_fraction / ep, fwdbwd_flops / 1e9,
        100.0 * fwdbwd_flops / fma_peak[t], op, opt_bytes_per_s / 1e9, fb, mib(f.state_bytes),
        f.peak ? mib(*f.peak) : NAN, f.peak ? *f.peak / f.state_bytes : NAN,
        f.rss_first ? mib(*f.rss_first) : NAN, f.rss_last ? mib(*f.rss_last) : NAN,
        f.anon_first ? mib(*f.anon_first) : NAN, f.anon_last ? mib(*f.anon_last) : NAN);
    runs.push_back(std::move(f));
  }
  std::printf(
      "(s/epoch: train_step with the fused optimizer update; fwd+bwd and opt: the same epochs run "
      "as train_step then optimizer::step, timed apart; %%peak: fwd+bwd FLOP/s over the FMA "
      "peak; opt GB/s: the bytes the optimizer must move per step (weights read and written, "
      "gradients "
      "read, its state read and written) over opt s, to hold against the triad)\n");

  std::printf(
      "one %lldx%lld layer over and over, kernel hot in cache (the products without the step's "
      "memory traffic):\n",
      static_cast<long long>(width), static_cast<long long>(width));
  std::printf("%-7s %14s %6s %14s %6s %14s %6s\n", "threads", "forward GF/s", "%peak", "dW GF/s",
              "%peak", "dW+dX GF/s", "%peak");
  for (int t : o.threads) {
    const phase_rates p = hot_phases(t, o.quick);
    std::printf("%-7d %14.1f %5.0f%% %14.1f %5.0f%% %14.1f %5.0f%%\n", t, p.forward / 1e9,
                100.0 * p.forward / fma_peak[t], p.dw / 1e9, 100.0 * p.dw / fma_peak[t],
                p.backward / 1e9, 100.0 * p.backward / fma_peak[t]);
  }

  if (o.torch) {
    std::printf("%-7s %9s %12s %12s %12s %12s\n", "threads", "baton s", "torch stock",
                "torch tuned", "stock/baton", "tuned/baton");
    std::string python;
    torch_result probe;
    for (const auto& candidate : o.pythons) {
      probe = run_torch(candidate, runs.front().threads, false, o);
      if (probe.available || probe.note.rfind("unavailable", 0) != 0) {
        python = candidate;
        break;
      }
    }
    if (!probe.available) {
      std::printf("PyTorch: skipped (%s)\n", probe.note.c_str());
      // Importable but failing is a broken bench; not installed is fine.
      if (!python.empty()) ok = false;
    } else {
      std::printf("PyTorch %s, BLAS %s\n", python.c_str(), probe.blas.c_str());
      for (const auto& f : runs) {
        const torch_result stock =
            &f == &runs.front() ? probe : run_torch(python, f.threads, false, o);
        const torch_result tuned = run_torch(python, f.threads, true, o);
        ok = ok && stock.available && tuned.available;
        const double b = median(f.epoch_s), s = median(stock.epoch_s), u = median(tuned.epoch_s);
        std::printf("%-7d %9.3f %12.3f %12.3f %12.2f %12.2f\n", f.threads, b, s, u, s / b, u / b);
      }
    }
  }
  std::printf("load average (1 min) at end: %s\n", load_average().c_str());
  if (!ok) std::fprintf(stderr, "worker_bench: a run failed (non-finite loss or broken torch)\n");
  return ok ? 0 : 1;
}
