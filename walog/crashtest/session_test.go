package crashtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/locking-center/locking-center/client/protocol"
)

// sess is a small session client (docs/protocol.md) for the crash test, written on
// wire's frames so that the test depends on nothing but the protocol: one
// request at a time from its owner, and a pinger that keeps the session
// alive while a Lock waits.
type sess struct {
	conn net.Conn
	id   uint64
	ttl  time.Duration

	// wmu guards writes on conn and next: the owner's requests and the
	// pinger's Pings share the connection.
	wmu  sync.Mutex
	next uint32

	stop chan struct{} // closed by close: the pinger ends
	done chan struct{} // closed when the pinger has ended
}

// errOpenRefused is an open or resume answered '-'.
var errOpenRefused = errors.New("session open refused")

// pingID marks the ids of Pings, so that their answers are told from the
// owner's (whose ids stay below it).
const pingID = 1 << 31

// openSession opens a session on addr (resume 0) or resumes one. A '-'
// comes back as errOpenRefused.
func openSession(addr, source string, ttl time.Duration, resume uint64) (*sess, error) {
	conn, err := net.DialTimeout("tcp", addr, 15*time.Second) // see v1Ask
	if err != nil {
		return nil, err
	}
	_ = conn.(*net.TCPConn).SetLinger(0) // closed with a reset: no TIME_WAIT left (see v1Ask)
	b, err := protocol.Open{Version: protocol.SessionVersion, TTLMillis: uint32(ttl / time.Millisecond), Resume: resume, Source: source}.Append(nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var ans [protocol.OpenAnswerSize]byte
	// One err for both steps: a failed read must not pass for an answer
	// of thirteen zero bytes (a refusal).
	_, err = conn.Write(b)
	if err == nil {
		_, err = io.ReadFull(conn, ans[:])
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	oa, _ := protocol.DecodeOpenAnswer(ans[:])
	if oa.Status != protocol.AnswerOK {
		conn.Close()
		return nil, fmt.Errorf("%w (status %q)", errOpenRefused, oa.Status)
	}
	if oa.Session == 0 || resume != 0 && oa.Session != resume {
		conn.Close()
		return nil, fmt.Errorf("open answered session %016x (resume %016x)", oa.Session, resume)
	}
	s := &sess{conn: conn, id: oa.Session, ttl: time.Duration(oa.TTLMillis) * time.Millisecond,
		stop: make(chan struct{}), done: make(chan struct{})}
	go s.pinger() // ended by close
	return s, nil
}

// pinger sends a Ping every third of the TTL, as clients do, until close
// or a failed write.
func (s *sess) pinger() {
	defer close(s.done)
	tick := time.NewTicker(s.ttl / 3)
	defer tick.Stop()
	for n := uint32(0); ; n++ {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		b, _ := protocol.Request{Action: protocol.Ping, ID: pingID | n}.Append(nil)
		s.wmu.Lock()
		_, err := s.conn.Write(b)
		s.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

// do sends one request and returns its answer, skipping the answers to
// Pings. It fails when the connection does, or after timeout.
func (s *sess) do(action protocol.Action, key string, token uint64, timeout time.Duration) (protocol.Answer, error) {
	s.wmu.Lock()
	s.next++
	id := s.next
	b, err := protocol.Request{Action: action, ID: id, Token: token, Key: key}.Append(nil)
	if err == nil {
		_, err = s.conn.Write(b)
	}
	s.wmu.Unlock()
	if err != nil {
		return protocol.Answer{}, err
	}
	s.conn.SetReadDeadline(time.Now().Add(timeout))
	var buf [protocol.AnswerSize]byte
	for {
		if _, err := io.ReadFull(s.conn, buf[:]); err != nil {
			return protocol.Answer{}, err
		}
		a, _ := protocol.DecodeAnswer(buf[:])
		if a.ID == id {
			return a, nil
		}
		if a.ID&pingID == 0 {
			return a, fmt.Errorf("answer for id %d while waiting for %d", a.ID, id)
		}
	}
}

// close drops the connection (the session is then disconnected, not
// ended) and stops the pinger.
func (s *sess) close() {
	s.conn.Close()
	close(s.stop)
	<-s.done
}
