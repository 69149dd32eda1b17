package lctest

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// DNS is a DNS server for tests, on a UDP port of 127.0.0.1: it answers
// the A and AAAA questions for the names it was given, NXDOMAIN for any
// other, and counts the questions. Resolver returns a net.Resolver that
// asks it alone, so that a test can give a client a name with several
// records without a DNS server of the system's or an edit of /etc/hosts.
type DNS struct {
	conn *net.UDPConn
	mu   sync.Mutex // guards records and asked
	// records maps a lower-case name without the final dot to its
	// addresses.
	records map[string][]netip.Addr
	asked   map[string]int
}

// StartDNS starts a DNS server answering records (name → addresses); it
// stops at the end of the test.
func StartDNS(t testing.TB, records map[string][]netip.Addr) *DNS {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	d := &DNS{conn: conn, records: map[string][]netip.Addr{}, asked: map[string]int{}}
	for name, addrs := range records {
		d.records[strings.ToLower(strings.TrimSuffix(name, "."))] = addrs
	}
	done := make(chan struct{})
	go func() { // ends when conn is closed at cleanup
		defer close(done)
		d.serve()
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return d
}

// Resolver asks this server only.
func (d *DNS) Resolver() *net.Resolver {
	addr := d.conn.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "udp", addr)
	}}
}

// Asked returns how many A or AAAA questions name was asked.
func (d *DNS) Asked(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.asked[strings.ToLower(strings.TrimSuffix(name, "."))]
}

func (d *DNS) serve() {
	buf := make([]byte, 512)
	for {
		n, peer, err := d.conn.ReadFromUDP(buf)
		if err != nil {
			return // closed
		}
		if resp := d.answer(buf[:n]); resp != nil {
			_, _ = d.conn.WriteToUDP(resp, peer)
		}
	}
}

// answer builds the response to one query; nil for a packet that is not
// one question.
func (d *DNS) answer(q []byte) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	// The question: labels, then type and class.
	var labels []string
	i := 12
	for {
		if i >= len(q) {
			return nil
		}
		l := int(q[i])
		i++
		if l == 0 {
			break
		}
		if l > 63 || i+l > len(q) {
			return nil
		}
		labels = append(labels, string(q[i:i+l]))
		i += l
	}
	if i+4 > len(q) {
		return nil
	}
	qtype := binary.BigEndian.Uint16(q[i : i+2])
	question := q[12 : i+4]
	name := strings.ToLower(strings.Join(labels, "."))

	d.mu.Lock()
	addrs, known := d.records[name]
	if qtype == 1 || qtype == 28 {
		d.asked[name]++
	}
	d.mu.Unlock()
	var answers [][]byte
	for _, a := range addrs {
		if (qtype == 1 && a.Is4()) || (qtype == 28 && a.Is6() && !a.Is4In6()) {
			rr := []byte{0xc0, 12} // the name: a pointer to the question's
			rr = binary.BigEndian.AppendUint16(rr, qtype)
			rr = binary.BigEndian.AppendUint16(rr, 1) // IN
			rr = binary.BigEndian.AppendUint32(rr, 0) // TTL 0: asked again each time
			b := a.AsSlice()
			rr = binary.BigEndian.AppendUint16(rr, uint16(len(b)))
			answers = append(answers, append(rr, b...))
		}
	}
	flags := uint16(0x8180) // a response, recursion desired and available
	if !known {
		flags |= 3 // NXDOMAIN
	}
	resp := make([]byte, 12, 512)
	copy(resp, q[:2]) // the id
	binary.BigEndian.PutUint16(resp[2:], flags)
	binary.BigEndian.PutUint16(resp[4:], 1)
	binary.BigEndian.PutUint16(resp[6:], uint16(len(answers)))
	resp = append(resp, question...)
	for _, rr := range answers {
		resp = append(resp, rr...)
	}
	return resp
}
