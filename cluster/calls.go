package cluster

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"time"
)

// Node-to-node calls on the cluster port, after the handshake and the
// purpose byte purposeCall: one request, one reply, each a JSON object
// preceded by its size (4 bytes, big-endian, at most maxCall). A follower
// forwards membership changes to the leader this way, and the leader asks
// each node how far it has applied (to promote a caught-up non-voter).
const maxCall = 64 << 10

// callRequest is a call: Op is "info", "add", "remove" or "transfer".
type callRequest struct {
	Op      string `json:"op"`
	ID      string `json:"id,omitempty"`
	Address string `json:"address,omitempty"`
}

// callReply is a call's answer. Code names the sentinel error of a
// refusal (see errorCodes), Error says it in words; Leader is the leader
// after a transfer. Info is an "info" call's.
type callReply struct {
	Code   string    `json:"code,omitempty"`
	Error  string    `json:"error,omitempty"`
	Leader string    `json:"leader,omitempty"`
	Info   *nodeInfo `json:"info,omitempty"`
}

// nodeInfo is what a node says of itself to the leader.
type nodeInfo struct {
	ID            string `json:"id"`
	Term          uint64 `json:"term"`
	LastIndex     uint64 `json:"last_index"`
	AppliedIndex  uint64 `json:"applied_index"`
	LastContactMS int64  `json:"last_contact_ms"` // -1: never heard from a leader
}

func writeMessage(c net.Conn, v any, deadline time.Time) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxCall {
		return fmt.Errorf("cluster: call of %d bytes", len(b))
	}
	_ = c.SetWriteDeadline(deadline)
	_, err = c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	if err == nil {
		_, err = c.Write(b)
	}
	return err
}

func readMessage(c net.Conn, v any, deadline time.Time) error {
	_ = c.SetReadDeadline(deadline)
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size == 0 || size > maxCall {
		return fmt.Errorf("cluster: call of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serveCall answers one call on an authenticated connection.
func (s *streamLayer) serveCall(c net.Conn) {
	var req callRequest
	if err := readMessage(c, &req, time.Now().Add(handshakeTimeout)); err != nil {
		s.log.Warn("cluster: unreadable call on the cluster port", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	reply := callReply{Code: "refused", Error: "this node takes no calls"}
	if s.call != nil {
		reply = s.call(req)
	}
	if err := writeMessage(c, reply, time.Now().Add(handshakeTimeout)); err != nil {
		s.log.Debug("cluster: call's reply not sent", "remote", c.RemoteAddr().String(), "err", err)
	}
}

// callNode makes one call to the node at address and waits up to timeout
// for its reply.
func (s *streamLayer) callNode(address string, req callRequest, timeout time.Duration) (callReply, error) {
	var reply callReply
	// Held in dialed like raft's connections: the leader's promotion loop
	// calls every member, and a shutdown must not wait out a silent one.
	var raw net.Conn
	defer func() {
		if raw != nil {
			s.untrack(raw)
		}
	}()
	c, err := s.dialHeld(address, min(timeout, handshakeTimeout), []byte{purposeCall}, s.holdDial(&raw))
	if err != nil {
		return reply, err
	}
	defer c.Close()
	deadline := time.Now().Add(timeout)
	if err := writeMessage(c, req, deadline); err != nil {
		return reply, fmt.Errorf("cluster: call %s: %w", address, err)
	}
	if err := readMessage(c, &reply, deadline); err != nil {
		return reply, fmt.Errorf("cluster: call %s: %w", address, err)
	}
	return reply, nil
}
