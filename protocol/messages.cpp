#include "protocol/messages.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "protocol/json_parse.h"

namespace baton::protocol {

namespace {

using json = nlohmann::json;

// Messages are flat; the slack lets a future version nest a little without old readers failing.
constexpr std::size_t max_message_depth = 16;

template <class... Ts>
struct overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string dump(const json& j) {
  // Worker text (an exception's what()) may not be UTF-8; replace rather than throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Field readers: `ctx` is "<type>.<field>" so errors read "progress.step: expected an integer".
struct reader {
  const json& obj;
  std::string type;

  result<const json*> get(const char* field) const {
    auto it = obj.find(field);
    if (it == obj.end()) return make_error(type + "." + field + ": missing");
    return &*it;
  }
  error bad(const char* field, const char* expected, const json& v) const {
    return make_error(type + "." + field + ": expected " + expected + ", got " +
                      std::string(v.type_name()));
  }
  result<std::int64_t> integer(const char* field) const {
    auto v = get(field);
    if (!v) return v.error();
    const json& j = **v;
    if (j.is_number_unsigned()) {
      if (j.get<std::uint64_t>() >
          static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return make_error(type + "." + field + ": " + j.dump() + " is out of range");
      }
      return static_cast<std::int64_t>(j.get<std::uint64_t>());
    }
    if (j.is_number_integer()) return j.get<std::int64_t>();
    return bad(field, "an integer", j);
  }
  result<double> real(const json& j, const std::string& name) const {
    if (j.is_null()) return std::numeric_limits<double>::quiet_NaN();  // how NaN/inf travel
    if (j.is_number()) return j.get<double>();
    return make_error(name + ": expected a number, got " + std::string(j.type_name()));
  }
  result<double> real(const char* field) const {
    auto v = get(field);
    if (!v) return v.error();
    return real(**v, type + "." + field);
  }
  result<std::string> text(const char* field) const {
    auto v = get(field);
    if (!v) return v.error();
    if (!(*v)->is_string()) return bad(field, "a string", **v);
    return (*v)->get<std::string>();
  }
  result<bool> boolean(const char* field) const {
    auto v = get(field);
    if (!v) return v.error();
    if (!(*v)->is_boolean()) return bad(field, "a boolean", **v);
    return (*v)->get<bool>();
  }
};

#define BATON_READ(var, expr) \
  auto var = (expr);          \
  if (!var) return var.error()

// Shared front half of both decoders: size, JSON, object, "type".
result<json> parse_line(std::string_view line, std::string& type) {
  if (line.size() > max_message_bytes) {
    return make_error("message of " + std::to_string(line.size()) + " bytes exceeds the limit of " +
                      std::to_string(max_message_bytes));
  }
  // A Windows pipe ends lines in \r\n; the caller splits on \n.
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.find_first_not_of(" \t") == std::string_view::npos) {
    return make_error("empty line, expected a JSON object");
  }
  auto doc = parse_json_guarded<json>(line, max_message_depth);
  if (!doc) return make_error("not JSON: " + doc.error().message);
  if (!doc->is_object()) {
    return make_error("expected a JSON object, got " + std::string(doc->type_name()));
  }
  auto t = doc->find("type");
  if (t == doc->end()) return make_error("message has no \"type\"");
  if (!t->is_string()) {
    return make_error("message \"type\" is a " + std::string(t->type_name()) +
                      ", expected a string");
  }
  type = t->get<std::string>();
  return doc;
}

result<worker_message> decode_worker(const json& j, const std::string& type) {
  reader r{j, type};
  if (type == "hello") {
    BATON_READ(protocol, r.integer("protocol"));
    BATON_READ(pid, r.integer("pid"));
    BATON_READ(worker, r.text("worker"));
    if (*protocol < std::numeric_limits<int>::min() ||
        *protocol > std::numeric_limits<int>::max()) {
      return make_error("hello.protocol: " + std::to_string(*protocol) + " is out of range");
    }
    return hello_msg{static_cast<int>(*protocol), *pid, *worker};
  }
  if (type == "progress") {
    progress_msg m;
    BATON_READ(step, r.integer("step"));
    BATON_READ(total, r.integer("total_steps"));
    BATON_READ(epoch, r.integer("epoch"));
    BATON_READ(loss, r.real("loss"));
    BATON_READ(sps, r.real("samples_per_sec"));
    m.step = *step;
    m.total_steps = *total;
    m.epoch = *epoch;
    m.loss = *loss;
    m.samples_per_sec = *sps;
    if (auto it = j.find("metrics"); it != j.end()) {  // optional: a worker may have none
      if (!it->is_object()) return r.bad("metrics", "an object", *it);
      for (const auto& [k, v] : it->items()) {
        BATON_READ(x, r.real(v, "progress.metrics." + k));
        m.metrics[k] = *x;
      }
    }
    if (auto it = j.find("shard_end_step"); it != j.end() && !it->is_null()) {
      BATON_READ(end, r.integer("shard_end_step"));
      m.shard_end_step = *end;
    }
    return m;
  }
  if (type == "checkpoint") {
    BATON_READ(path, r.text("path"));
    BATON_READ(step, r.integer("step"));
    checkpoint_msg m{*path, *step, std::nullopt};
    if (auto it = j.find("digest"); it != j.end() && !it->is_null()) {
      BATON_READ(digest, r.text("digest"));
      m.digest = *digest;
    }
    return m;
  }
  if (type == "done") {
    BATON_READ(step, r.integer("step"));
    BATON_READ(complete, r.boolean("job_complete"));
    return done_msg{*step, *complete};
  }
  if (type == "error") {
    BATON_READ(message, r.text("message"));
    return error_msg{*message};
  }
  return make_error("unknown message type \"" + type + "\"");
}

}  // namespace

std::string encode(const worker_message& m) {
  return std::visit(
      overloaded{
          [](const hello_msg& h) {
            return dump({{"type", "hello"},
                         {"protocol", h.protocol},
                         {"pid", h.pid},
                         {"worker", h.worker}});
          },
          [](const progress_msg& p) {
            json metrics = json::object();
            for (const auto& [k, v] : p.metrics) metrics[k] = number(v);
            json j = {{"type", "progress"},
                      {"step", p.step},
                      {"total_steps", p.total_steps},
                      {"epoch", p.epoch},
                      {"loss", number(p.loss)},
                      {"metrics", metrics},
                      {"samples_per_sec", number(p.samples_per_sec)}};
            if (p.shard_end_step) j["shard_end_step"] = *p.shard_end_step;
            return dump(j);
          },
          [](const checkpoint_msg& c) {
            json j = {{"type", "checkpoint"}, {"path", c.path}, {"step", c.step}};
            if (c.digest) j["digest"] = *c.digest;
            return dump(j);
          },
          [](const done_msg& d) {
            return dump({{"type", "done"}, {"step", d.step}, {"job_complete", d.job_complete}});
          },
          [](const error_msg& e) {
            return dump({{"type", "error"}, {"message", e.message}});
          },
      },
      m);
}

std::string encode(const supervisor_message& m) {
  return std::visit(overloaded{[](const stop_msg&) {
                                 return dump({{"type", "stop"}});
                               },
                               [](const resume_msg&) {
                                 return dump({{"type", "resume"}});
                               }},
                    m);
}

result<worker_message> decode_worker_message(std::string_view line) {
  std::string type;
  auto j = parse_line(line, type);
  if (!j) return j.error();
  auto m = decode_worker(*j, type);
  if (!m && is_worker_message_type(type)) {
    return make_error(m.error().message, errc::protocol_violation);
  }
  return m;
}

result<supervisor_message> decode_supervisor_message(std::string_view line) {
  std::string type;
  auto j = parse_line(line, type);
  if (!j) return j.error();
  if (type == "stop") return stop_msg{};
  if (type == "resume") return resume_msg{};
  return make_error("unknown message type \"" + type + "\"");
}

bool is_worker_message_type(std::string_view type) {
  return type == "hello" || type == "progress" || type == "checkpoint" || type == "done" ||
         type == "error";
}

bool names_no_space(std::string_view text) {
  std::string lower(text);
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* needle : {"enospc", "edquot", "no space left on device", "disk quota exceeded",
                             "quota exceeded", "not enough space on the disk", "disk is full"}) {
    if (lower.find(needle) != std::string::npos) return true;
  }
  return false;
}

status check_protocol(const hello_msg& h) {
  if (h.protocol != protocol_version) {
    return make_error("worker \"" + h.worker + "\" speaks protocol " + std::to_string(h.protocol) +
                      ", this supervisor speaks " + std::to_string(protocol_version));
  }
  return {};
}

}  // namespace baton::protocol
