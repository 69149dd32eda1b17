package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"
)

// flash reports an action done by the previous request (post, redirect,
// get): a reset or a session's end.
type flash struct {
	By       string // "key", "source", "session", or on the cluster page "transfer" or "remove"
	Name     string
	Released int
	Refused  int
}

// flashTTL is how long the link that a finished action redirects to shows
// its banner: long enough for a reload, short enough that an old link in
// the history shows nothing stale.
const flashTTL = 10 * time.Minute

// flashBy numbers the kinds of action in a sealed flash.
var flashBy = [...]string{"key", "source", "session", "transfer", "remove"}

// sealFlash encodes f for the redirect's ?done= parameter, signed with
// the server's key so that nobody else can make the dashboard show a
// banner: a link with a made-up outcome shows nothing.
//
//	payload: [by:1][issued unix seconds:8][released:4][refused:4][name...]
//	token  : base64url(payload) "." base64url(first 16 bytes of HMAC-SHA256(key, payload))
func (s *server) sealFlash(f flash, now time.Time) string {
	by := 0
	for i, n := range flashBy {
		if n == f.By {
			by = i
		}
	}
	p := make([]byte, 17, 17+len(f.Name))
	p[0] = byte(by)
	binary.BigEndian.PutUint64(p[1:], uint64(now.Unix()))
	binary.BigEndian.PutUint32(p[9:], uint32(f.Released))
	binary.BigEndian.PutUint32(p[13:], uint32(f.Refused))
	p = append(p, f.Name...)
	return base64.RawURLEncoding.EncodeToString(p) + "." + base64.RawURLEncoding.EncodeToString(s.flashMAC(p))
}

// openFlash returns the flash sealed in token, or nil when the token is
// absent, forged, altered or older than flashTTL.
func (s *server) openFlash(token string, now time.Time) *flash {
	enc, sig, ok := strings.Cut(token, ".")
	if !ok {
		return nil
	}
	p, err1 := base64.RawURLEncoding.DecodeString(enc)
	mac, err2 := base64.RawURLEncoding.DecodeString(sig)
	if err1 != nil || err2 != nil || len(p) < 17 || !hmac.Equal(mac, s.flashMAC(p)) || int(p[0]) >= len(flashBy) {
		return nil
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(p[1:])), 0)
	if now.Sub(issued) > flashTTL || issued.Sub(now) > time.Minute {
		return nil
	}
	return &flash{By: flashBy[p[0]], Name: string(p[17:]),
		Released: int(binary.BigEndian.Uint32(p[9:])), Refused: int(binary.BigEndian.Uint32(p[13:]))}
}

func (s *server) flashMAC(p []byte) []byte {
	m := hmac.New(sha256.New, s.flashKey[:])
	m.Write(p)
	return m.Sum(nil)[:16]
}

// flashKeyOf derives the signing key from a shared secret (Options.FlashKey),
// or draws one when there is none.
func flashKeyOf(secret []byte) (k [32]byte) {
	if len(secret) == 0 {
		return newFlashKey()
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("locking-center web flash key"))
	copy(k[:], m.Sum(nil))
	return k
}

// newFlashKey is the signing key of one server's lifetime: a restart
// makes older banner links show nothing, which is harmless.
func newFlashKey() (k [32]byte) {
	rand.Read(k[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return k
}
