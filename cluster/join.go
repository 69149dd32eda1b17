package cluster

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// A joining node (CLUSTER_JOIN) asks a member's web port to add it, and
// proves it knows CLUSTER_TOKEN with the request: a proof over the body
// and the time, "t=<unix seconds>,mac=<hex HMAC-SHA256(token,
// "join\n" t "\n" body)>", accepted within JoinWindow of the receiver's
// clock. Replaying a captured join within the window only adds the same
// node again, which changes nothing; the token itself never travels.

// JoinWindow is how far a join proof's time may be from the receiver's.
const JoinWindow = 5 * time.Minute

// SignJoin returns the proof of a join request with body, made at now.
func SignJoin(token string, body []byte, now time.Time) string {
	t := strconv.FormatInt(now.Unix(), 10)
	return "t=" + t + ",mac=" + hex.EncodeToString(joinMAC(token, t, body))
}

// VerifyJoin reports whether proof proves token over body at now.
func VerifyJoin(token, proof string, body []byte, now time.Time) bool {
	ts, mac, ok := strings.Cut(proof, ",")
	if !ok || !strings.HasPrefix(ts, "t=") || !strings.HasPrefix(mac, "mac=") {
		return false
	}
	t := ts[2:]
	sec, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return false
	}
	if d := now.Sub(time.Unix(sec, 0)); d > JoinWindow || d < -JoinWindow {
		return false
	}
	got, err := hex.DecodeString(mac[4:])
	return err == nil && hmac.Equal(got, joinMAC(token, t, body))
}

func joinMAC(token, t string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("join\n" + t + "\n"))
	m.Write(body)
	return m.Sum(nil)
}
