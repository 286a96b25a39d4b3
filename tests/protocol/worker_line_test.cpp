#include "protocol/worker_line.h"

#include <catch2/catch.hpp>
#include <string>

using baton::protocol::read_worker_line;

namespace {

const std::string hello = R"({"type":"hello","protocol":1,"pid":42,"worker":"chatty 1.0"})";

}  // namespace

TEST_CASE("a protocol line alone is a message and no text", "[unit][worker_line]") {
  const auto r = read_worker_line(hello);
  CHECK(r.text.empty());
  REQUIRE(r.message);
  const auto* h = std::get_if<baton::protocol::hello_msg>(&*r.message);
  REQUIRE(h);
  CHECK(h->pid == 42);
  CHECK(h->worker == "chatty 1.0");
}

TEST_CASE("text before a message is text, and the message is still read", "[unit][worker_line]") {
  const std::string line = R"(loss is falling {"type":"progress","step":7,"total_steps":90,)"
                           R"("epoch":0,"loss":0.5,"samples_per_sec":10.0})";
  const auto r = read_worker_line(line);
  CHECK(r.text == "loss is falling ");
  REQUIRE(r.message);
  const auto* p = std::get_if<baton::protocol::progress_msg>(&*r.message);
  REQUIRE(p);
  CHECK(p->step == 7);
  CHECK(p->total_steps == 90);
}

TEST_CASE("a hello after a Keras-style progress bar is read", "[unit][worker_line]") {
  // What stdout holds when a bar is drawn with '\r' and the hello follows without a newline
  // (the splitter cuts at the last '\r', so the last redraw shares the hello's line).
  const std::string bar = "1/157 [..............................] - ETA: 0s - loss: 0.6931";
  const std::string line = bar + hello;
  const auto r = read_worker_line(line);
  CHECK(r.text == bar);
  REQUIRE(r.message);
  CHECK(std::holds_alternative<baton::protocol::hello_msg>(*r.message));
}

TEST_CASE("a brace that does not start a message leaves the whole line text",
          "[unit][worker_line]") {
  for (const std::string& line :
       {std::string("config {'lr': 0.1, 'batch': 32}"), std::string("set {a, b} and {\"x\":1}"),
        std::string("almost " + hello.substr(0, hello.size() - 1)),
        std::string("unknown {\"type\":\"explode\"}"), std::string("{not json at all"),
        std::string("{\"type\":\"hello\"} trailing")}) {
    INFO(line);
    const auto r = read_worker_line(line);
    CHECK(r.text == line);
    CHECK_FALSE(r.message);
  }
}

TEST_CASE("plain text is text and blank text is nothing", "[unit][worker_line]") {
  auto r = read_worker_line("Epoch 1/20");
  CHECK(r.text == "Epoch 1/20");
  CHECK_FALSE(r.message);
  r = read_worker_line("   \t");
  CHECK(r.text.empty());
  CHECK_FALSE(r.message);
  // A bar's remains that are only spaces are not logged; the message still counts.
  const std::string padded = "     " + hello;
  r = read_worker_line(padded);
  CHECK(r.text.empty());
  CHECK(r.message);
}

TEST_CASE("a known message type with a broken schema is a violation, not text",
          "[unit][worker_line]") {
  // The issue's case: the step as a string once let a bad checkpoint line pass as a log line.
  for (const std::string& line :
       {std::string(R"({"type":"checkpoint","path":"/x/ckpt","step":"40"})"),
        std::string(R"({"type":"done","step":60})"),
        std::string(R"({"type":"progress","step":1.5,"total_steps":9,"epoch":0,"loss":1,)"
                    R"("samples_per_sec":1})"),
        std::string(R"({"type":"hello","protocol":"1","pid":1,"worker":"w"})"),
        std::string(R"(bar 100% {"type":"error","message":7})")}) {
    INFO(line);
    const auto r = read_worker_line(line);
    CHECK_FALSE(r.message);
    REQUIRE(r.violation);
    CHECK(r.violation->code == baton::errc::protocol_violation);
  }
  const auto r = read_worker_line(R"({"type":"checkpoint","path":"/x","step":"40"})");
  CHECK(r.violation->message == "checkpoint.step: expected an integer, got string");
  CHECK(r.text.empty());
  const auto bar = read_worker_line(R"(bar 100% {"type":"done","step":"1","job_complete":true})");
  CHECK(bar.text == "bar 100% ");
  CHECK(bar.violation);
}

TEST_CASE("JSON that is not meant as a message stays text", "[unit][worker_line]") {
  for (const std::string& line :
       {std::string(R"({"loss": 0.5, "epoch": 3})"), std::string(R"({"type":"metric","v":1})"),
        std::string(R"({"type": 7})")}) {
    INFO(line);
    const auto r = read_worker_line(line);
    CHECK(r.text == line);
    CHECK_FALSE(r.message);
    CHECK_FALSE(r.violation);
  }
}
