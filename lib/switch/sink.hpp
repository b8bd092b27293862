// Where a reducer's frames go: a header, a body and a destination, handed to
// a Sink. The pipeline's Emitter turns them into mbufs; tests capture them.
//
// A RESULT is made once: the reducer finalizes into the buffer the sink
// gives it (result_buffer), and send_result() sends that memory to every
// destination: the Emitter hands out the first frame's own payload area,
// so the body is written where it is sent from and summed once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "proto/packet.hpp"

namespace prism::sw {

// Where one copy of a fan-out goes: a switch port, the switch's endpoint on
// it and the receiver's.
struct Dest {
  uint16_t port;
  wire::Endpoint src, dst;
  wire::HeaderTemplate hdr;  // wire::header_template(src, dst)
};

// A frame to send (NACKs, PARTIALs): header and body.
struct Out {
  uint16_t port;  // switch port to send it on
  wire::Endpoint src, dst;
  wire::Header h;
  std::shared_ptr<const std::vector<uint8_t>> body;  // null: no body (a NACK)
  size_t body_size() const { return body ? body->size() : 0; }
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void send(Out&& o) = 0;
  // Memory for a RESULT body of up to `bytes` bytes, valid until the next
  // send_result(). This default is a vector of the sink's own.
  virtual uint8_t* result_buffer(size_t bytes) {
    result_.resize(bytes);
    return result_.data();
  }
  // Sends the first `len` bytes of the result buffer with header `h` to
  // each of `to`. This default sends each copy as its own Out.
  virtual void send_result(const wire::Header& h, size_t len, std::span<const Dest> to) {
    auto body = std::make_shared<const std::vector<uint8_t>>(result_.begin(), result_.begin() + long(len));
    for (const Dest& d : to) send(Out{d.port, d.src, d.dst, h, body});
  }

 private:
  std::vector<uint8_t> result_;
};

}  // namespace prism::sw
