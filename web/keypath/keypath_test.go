package keypath

import (
	"strings"
	"testing"
)

func TestEncode(t *testing.T) {
	for key, want := range map[string]string{
		"a/../b c.é": "a%2F%2E%2E%2Fb%20c%2E%C3%A9",
		"..":         "%2E%2E",
		"Az09-_~":    "Az09-_~",
		"":           "",
		"raw\xff":    "raw%FF",
	} {
		if got := Encode(key); got != want {
			t.Errorf("Encode(%q) = %q, want %q", key, got, want)
		}
	}
}

// FuzzRoundTrip checks that every string comes back byte for byte and
// never encodes to a '/' or '.'.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{"a/../b", "é", "\x00\xff", "%2F", "+ ?#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		enc := Encode(key)
		if strings.ContainsAny(enc, "/.") {
			t.Fatalf("Encode(%q) = %q contains '/' or '.'", key, enc)
		}
		got, err := Decode(enc)
		if err != nil || got != key {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", key, got, err)
		}
	})
}
