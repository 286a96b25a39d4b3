#include "protocol/messages.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

using namespace baton::protocol;

namespace {

template <class T>
T round_trip(const T& m) {
  const std::string line = encode(worker_message{m});
  CHECK(line.find('\n') == std::string::npos);
  auto d = decode_worker_message(line);
  REQUIRE(d);
  REQUIRE(std::holds_alternative<T>(*d));
  return std::get<T>(*d);
}

std::string worker_error(std::string_view line) {
  auto d = decode_worker_message(line);
  REQUIRE_FALSE(d);
  return d.error().message;
}

}  // namespace

TEST_CASE("hello round trip and wire form", "[unit][messages]") {
  hello_msg h{1, 4321, "baton-worker 0.1.0"};
  const auto line = encode(worker_message{h});
  CHECK(nlohmann::json::parse(line) ==
        nlohmann::json{
            {"type", "hello"}, {"protocol", 1}, {"pid", 4321}, {"worker", "baton-worker 0.1.0"}});
  auto back = round_trip(h);
  CHECK(back.protocol == 1);
  CHECK(back.pid == 4321);
  CHECK(back.worker == h.worker);
  CHECK(check_protocol(back));
  hello_msg future{2, 1, "w"};
  auto s = check_protocol(round_trip(future));
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("speaks protocol 2, this supervisor speaks 1"));
}

TEST_CASE("progress round trip", "[unit][messages]") {
  progress_msg p;
  p.step = 1234567890123;
  p.total_steps = 3140;
  p.epoch = 4;
  p.loss = 0.1234567890123456789;
  p.metrics = {{"accuracy", 0.875}, {"val_loss", 0.3}};
  p.samples_per_sec = 1520.25;
  auto back = round_trip(p);
  CHECK(back.step == p.step);
  CHECK(back.total_steps == p.total_steps);
  CHECK(back.epoch == p.epoch);
  CHECK(back.loss == p.loss);  // doubles print exactly (shortest round-trip form)
  CHECK(back.metrics == p.metrics);
  CHECK(back.samples_per_sec == p.samples_per_sec);
  CHECK_FALSE(back.shard_end_step);  // optional, and absent from the line when unset
  CHECK(encode(p).find("shard_end_step") == std::string::npos);
  p.shard_end_step = 3000;
  CHECK(round_trip(p).shard_end_step == std::optional<std::int64_t>(3000));
}

TEST_CASE("progress.shard_end_step must be an integer or null", "[unit][messages]") {
  const std::string head =
      R"({"type":"progress","step":1,"total_steps":2,"epoch":0,"loss":0.5,"samples_per_sec":1,)";
  auto null_end = decode_worker_message(head + R"("shard_end_step":null})");
  REQUIRE(null_end);
  CHECK_FALSE(std::get<progress_msg>(*null_end).shard_end_step);
  auto bad = decode_worker_message(head + R"("shard_end_step":"soon"})");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("progress.shard_end_step"));
  CHECK(bad.error().code == baton::errc::protocol_violation);
}

TEST_CASE("non-finite numbers travel as null and come back as NaN", "[unit][messages]") {
  progress_msg p;
  p.loss = std::numeric_limits<double>::quiet_NaN();
  p.metrics = {{"val_loss", std::numeric_limits<double>::infinity()}};
  p.samples_per_sec = -std::numeric_limits<double>::infinity();
  const auto line = encode(worker_message{p});
  const auto j = nlohmann::json::parse(line);
  CHECK(j["loss"].is_null());
  CHECK(j["metrics"]["val_loss"].is_null());
  CHECK(j["samples_per_sec"].is_null());
  auto back = round_trip(p);
  CHECK(std::isnan(back.loss));
  CHECK(std::isnan(back.metrics.at("val_loss")));
  CHECK(std::isnan(back.samples_per_sec));
}

TEST_CASE("a checkpoint without a digest announces a folder", "[unit][messages]") {
  const auto line = encode(worker_message{checkpoint_msg{"/s/.staging-0/step-5", 5, std::nullopt}});
  CHECK(line == R"({"path":"/s/.staging-0/step-5","step":5,"type":"checkpoint"})");
  CHECK(round_trip(checkpoint_msg{"/s/.staging-0/step-5", 5, std::nullopt}).digest == std::nullopt);
  for (const char* text : {R"({"type":"checkpoint","path":"/s/x","step":5})",
                           R"({"type":"checkpoint","path":"/s/x","step":5,"digest":null})"}) {
    INFO(text);
    auto m = decode_worker_message(text);
    REQUIRE(m);
    const auto& c = std::get<checkpoint_msg>(*m);
    CHECK(c.path == "/s/x");
    CHECK(c.step == 5);
    CHECK_FALSE(c.digest.has_value());
  }
}

TEST_CASE("checkpoint, done, error and stop round trip", "[unit][messages]") {
  auto c = round_trip(checkpoint_msg{"/var/lib/baton/jobs/a/ckpt-000000000010.safetensors", 10,
                                     "xxh64:0123456789abcdef"});
  CHECK(c.path == "/var/lib/baton/jobs/a/ckpt-000000000010.safetensors");
  CHECK(c.step == 10);
  CHECK(c.digest == std::optional<std::string>("xxh64:0123456789abcdef"));
  auto d = round_trip(done_msg{3140, true});
  CHECK(d.step == 3140);
  CHECK(d.job_complete);
  CHECK_FALSE(round_trip(done_msg{5, false}).job_complete);
  auto e = round_trip(error_msg{"bad \"config\"\nline two"});
  CHECK(e.message == "bad \"config\"\nline two");

  const auto stop = encode(supervisor_message{stop_msg{}});
  CHECK(stop == R"({"type":"stop"})");
  auto s = decode_supervisor_message(stop);
  REQUIRE(s);
  CHECK(std::holds_alternative<stop_msg>(*s));
  const auto resume = encode(supervisor_message{resume_msg{}});
  CHECK(resume == R"({"type":"resume"})");
  auto r = decode_supervisor_message(resume);
  REQUIRE(r);
  CHECK(std::holds_alternative<resume_msg>(*r));
}

TEST_CASE("encoding never throws on text that is not UTF-8", "[unit][messages]") {
  const auto line = encode(worker_message{error_msg{"bad byte \xff here"}});
  auto back = decode_worker_message(line);
  REQUIRE(back);
  CHECK_THAT(std::get<error_msg>(*back).message, Catch::StartsWith("bad byte "));
}

TEST_CASE("decoding tolerates unknown fields and line endings", "[unit][messages]") {
  auto d = decode_worker_message(
      R"({"type":"done","step":3,"job_complete":false,"new_field":{"nested":[1,2]}})"
      "\r\n");
  REQUIRE(d);
  CHECK(std::get<done_msg>(*d).step == 3);
  auto p = decode_worker_message(
      R"({"type":"progress","step":1,"total_steps":2,"epoch":0,"loss":0.5,"samples_per_sec":1})");
  REQUIRE(p);  // metrics is optional
  CHECK(std::get<progress_msg>(*p).metrics.empty());
  auto s = decode_supervisor_message(R"({"type":"stop","reason":"memory"})");
  CHECK(s);
}

TEST_CASE("malformed worker lines are errors naming the problem", "[unit][messages]") {
  CHECK_THAT(worker_error("hello"), Catch::StartsWith("not JSON: invalid JSON at byte 0"));
  CHECK_THAT(worker_error(R"({"type":"done","step":1)"), Catch::StartsWith("not JSON"));
  CHECK_THAT(worker_error(""), Catch::Contains("empty line"));
  CHECK_THAT(worker_error("[1,2]"), Catch::Contains("expected a JSON object, got array"));
  CHECK_THAT(worker_error("42"), Catch::Contains("expected a JSON object, got number"));
  CHECK_THAT(worker_error(R"({"step":1})"), Catch::Contains("message has no \"type\""));
  CHECK_THAT(worker_error(R"({"type":3})"),
             Catch::Contains("\"type\" is a number, expected a string"));
  CHECK_THAT(worker_error(R"({"type":"explode"})"),
             Catch::Contains("unknown message type \"explode\""));
  CHECK_THAT(worker_error(R"({"type":"stop"})"), Catch::Contains("unknown message type \"stop\""));
  CHECK_THAT(worker_error(R"({"type":"done","step":1,"step":2,"job_complete":true})"),
             Catch::Contains("duplicate key \"step\""));
}

TEST_CASE("missing and mistyped fields name the field", "[unit][messages]") {
  CHECK(
      worker_error(
          R"({"type":"progress","step":"7","total_steps":2,"epoch":0,"loss":1,"samples_per_sec":1})") ==
      "progress.step: expected an integer, got string");
  CHECK(
      worker_error(
          R"({"type":"progress","step":1.5,"total_steps":2,"epoch":0,"loss":1,"samples_per_sec":1})") ==
      "progress.step: expected an integer, got number");
  CHECK(worker_error(
            R"({"type":"progress","total_steps":2,"epoch":0,"loss":1,"samples_per_sec":1})") ==
        "progress.step: missing");
  CHECK(
      worker_error(
          R"({"type":"progress","step":1,"total_steps":2,"epoch":0,"loss":"x","samples_per_sec":1})") ==
      "progress.loss: expected a number, got string");
  CHECK(
      worker_error(
          R"({"type":"progress","step":1,"total_steps":2,"epoch":0,"loss":1,"samples_per_sec":1,"metrics":[1]})") ==
      "progress.metrics: expected an object, got array");
  CHECK(
      worker_error(
          R"({"type":"progress","step":1,"total_steps":2,"epoch":0,"loss":1,"samples_per_sec":1,"metrics":{"acc":true}})") ==
      "progress.metrics.acc: expected a number, got boolean");
  CHECK(
      worker_error(
          R"({"type":"progress","step":18446744073709551615,"total_steps":2,"epoch":0,"loss":1,"samples_per_sec":1})") ==
      "progress.step: 18446744073709551615 is out of range");
  CHECK(worker_error(R"({"type":"hello","protocol":1,"pid":5})") == "hello.worker: missing");
  CHECK(worker_error(R"({"type":"hello","protocol":99999999999,"pid":5,"worker":"w"})") ==
        "hello.protocol: 99999999999 is out of range");
  CHECK(worker_error(R"({"type":"checkpoint","path":1,"step":1,"digest":"d"})") ==
        "checkpoint.path: expected a string, got number");
  CHECK(worker_error(R"({"type":"checkpoint","path":"p","step":1,"digest":7})") ==
        "checkpoint.digest: expected a string, got number");
  CHECK(worker_error(R"({"type":"done","step":1,"job_complete":1})") ==
        "done.job_complete: expected a boolean, got number");
  CHECK(worker_error(R"({"type":"error","message":null})") ==
        "error.message: expected a string, got null");
}

TEST_CASE("oversized and deeply nested lines are rejected", "[unit][messages]") {
  std::string big = R"({"type":"error","message":")" + std::string(max_message_bytes, 'x') + "\"}";
  CHECK_THAT(worker_error(big), Catch::Contains("exceeds the limit of 1048576"));
  std::string deep = R"({"type":"error","message":"m","x":)" + std::string(100000, '[') +
                     std::string(100000, ']') + "}";
  CHECK_THAT(worker_error(deep), Catch::Contains("nesting deeper than"));
  std::string objects;
  for (int i = 0; i < 50000; ++i) objects += R"({"a":)";
  auto s = decode_supervisor_message(objects);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.error().message, Catch::Contains("nesting deeper than"));
}

TEST_CASE("supervisor messages reject worker types", "[unit][messages]") {
  auto s = decode_supervisor_message(R"({"type":"hello","protocol":1,"pid":1,"worker":"w"})");
  REQUIRE_FALSE(s);
  CHECK(s.error().message == "unknown message type \"hello\"");
}

// Found by fuzz_worker_message (regressions/fuzz_worker_message/crash-acfa3ad9...): nlohmann's
// parse error quotes the raw bytes it last read, so a garbage line put invalid UTF-8 into the
// error text, which then makes a strict JSON dump (job records) throw. They are shown as \xNN.
TEST_CASE("errors quote undecodable bytes of a line as hex escapes", "[unit][messages]") {
  const std::string e = worker_error("{\"type\":\"error\",\"message\":\"out o\xc6\xc6\x01\"}");
  CHECK(e ==
        "not JSON: invalid JSON at byte 33: parse error at line 1, column 34: syntax error while "
        "parsing value - invalid string: ill-formed UTF-8 byte; last read: '\"out o\\xc6\\xc6'");
  CHECK_NOTHROW(nlohmann::json(e).dump());
}

TEST_CASE("a schema error of a known type carries the protocol_violation code",
          "[unit][messages]") {
  auto bad = decode_worker_message(R"({"type":"checkpoint","path":"/x","step":"40"})");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().code == baton::errc::protocol_violation);
  auto unknown = decode_worker_message(R"({"type":"explode"})");
  REQUIRE_FALSE(unknown);
  CHECK(unknown.error().code == baton::errc::unspecified);
  auto not_json = decode_worker_message("{nope");
  REQUIRE_FALSE(not_json);
  CHECK(not_json.error().code == baton::errc::unspecified);
}

TEST_CASE("names_no_space knows ENOSPC and EDQUOT in the words workers use", "[unit][messages]") {
  for (const char* text :
       {"write /x: No space left on device", "[Errno 28] No space left on device: '/s/w.bin'",
        "OSError: [Errno 122] Disk quota exceeded", "ENOSPC", "EDQUOT while saving",
        "There is not enough space on the disk."}) {
    INFO(text);
    CHECK(names_no_space(text));
  }
  for (const char* text : {"bad data: column 3", "No such file or directory", ""}) {
    INFO(text);
    CHECK_FALSE(names_no_space(text));
  }
}
