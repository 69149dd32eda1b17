package protocol

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
)

// sessionVectors is the session part of the shared vectors.
type sessionVectors struct {
	Open []struct {
		Name    string `json:"name"`
		Version byte   `json:"version"`
		TTL     uint32 `json:"ttl_ms"`
		Resume  string `json:"resume"`
		Source  string `json:"source"`
		Auth    string `json:"auth"`
		Hex     string `json:"hex"`
	} `json:"session_open"`
	OpenAnswers []struct {
		Name    string `json:"name"`
		Hex     string `json:"hex"`
		Status  string `json:"status"`
		TTL     uint32 `json:"ttl_ms"`
		Session string `json:"session"`
	} `json:"session_open_answers"`
	Requests []struct {
		Name   string `json:"name"`
		Action byte   `json:"action"`
		ID     uint32 `json:"id"`
		Token  string `json:"token"`
		Key    string `json:"key"`
		Hex    string `json:"hex"`
	} `json:"session_requests"`
	Answers []struct {
		Name   string `json:"name"`
		Hex    string `json:"hex"`
		ID     uint32 `json:"id"`
		Status string `json:"status"`
		Token  string `json:"token"`
	} `json:"session_answers"`
	Original []struct {
		Name   string `json:"name"`
		Action byte   `json:"action"`
		Key    string `json:"key"`
		Source string `json:"source"`
		Hex    string `json:"hex"`
	} `json:"original_frames"`
}

func u64(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("vector number %q: %v", s, err)
	}
	return n
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSessionVectors(t *testing.T) {
	var v sessionVectors
	if err := json.Unmarshal(readVectors(t), &v); err != nil {
		t.Fatalf("%s: %v", vectorsPath(), err)
	}
	if len(v.Open) == 0 || len(v.Requests) == 0 || len(v.Answers) == 0 || len(v.OpenAnswers) == 0 || len(v.Original) == 0 {
		t.Fatal("session vectors missing")
	}
	for _, o := range v.Open {
		t.Run("open/"+o.Name, func(t *testing.T) {
			want := unhex(t, o.Hex)
			f := Open{Version: o.Version, TTLMillis: o.TTL, Resume: u64(t, o.Resume), Source: o.Source, Auth: o.Auth}
			got, err := f.Append(nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, %v; want %s", got, err, o.Hex)
			}
			back, n, err := DecodeOpen(want)
			if err != nil || n != len(want) || back != f {
				t.Fatalf("DecodeOpen = %+v, %d, %v", back, n, err)
			}
			if _, _, err := DecodeOpen(want[:len(want)-1]); !errors.Is(err, ErrShort) {
				t.Fatalf("DecodeOpen of a cut frame = %v", err)
			}
		})
	}
	for _, a := range v.OpenAnswers {
		t.Run("open answer/"+a.Name, func(t *testing.T) {
			want := unhex(t, a.Hex)
			oa := OpenAnswer{Status: a.Status[0], TTLMillis: a.TTL, Session: u64(t, a.Session)}
			if got := oa.Append(nil); !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, want %s", got, a.Hex)
			}
			if back, err := DecodeOpenAnswer(want); err != nil || back != oa {
				t.Fatalf("DecodeOpenAnswer = %+v, %v", back, err)
			}
		})
	}
	for _, r := range v.Requests {
		t.Run("request/"+r.Name, func(t *testing.T) {
			want := unhex(t, r.Hex)
			req := Request{Action: Action(r.Action), ID: r.ID, Token: u64(t, r.Token), Key: r.Key}
			got, err := req.Append(nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, %v; want %s", got, err, r.Hex)
			}
			back, n, err := DecodeRequest(want)
			if err != nil || n != len(want) || back != req {
				t.Fatalf("DecodeRequest = %+v, %d, %v", back, n, err)
			}
		})
	}
	for _, a := range v.Answers {
		t.Run("answer/"+a.Name, func(t *testing.T) {
			want := unhex(t, a.Hex)
			ans := Answer{ID: a.ID, Status: a.Status[0], Token: u64(t, a.Token)}
			if got := ans.Append(nil); !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, want %s", got, a.Hex)
			}
			if back, err := DecodeAnswer(want); err != nil || back != ans {
				t.Fatalf("DecodeAnswer = %+v, %v", back, err)
			}
		})
	}
	for _, o := range v.Original {
		t.Run("original/"+o.Name, func(t *testing.T) {
			f, n, err := DecodeServer(unhex(t, o.Hex))
			want := Frame{Action: Action(o.Action), Key: o.Key, Source: o.Source}
			if err != nil || n != len(o.Hex)/2 || f != want {
				t.Fatalf("DecodeServer = %+v, %d, %v; want %+v", f, n, err, want)
			}
		})
	}
}

func TestSessionCodecRefusals(t *testing.T) {
	long := string(bytes.Repeat([]byte{'k'}, MaxField+1))
	if _, err := (Request{Action: Lock, Key: long}).Append(nil); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("Append of a 128-byte key = %v", err)
	}
	if _, err := (Open{Version: 1, Source: long}).Append(nil); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("Append of a 128-byte source = %v", err)
	}
	if _, err := (Open{Version: 1, Auth: long}).Append(nil); !errors.Is(err, ErrFieldTooLong) {
		t.Fatalf("Append of a 128-byte auth = %v", err)
	}
	neg := []byte{byte(Lock), 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 'x'}
	r, n, err := DecodeRequest(neg)
	if err != nil || !r.BadSize || n != RequestHeaderSize {
		t.Fatalf("DecodeRequest with a negative size = %+v, %d, %v", r, n, err)
	}
	if _, _, err := DecodeOpen([]byte{16, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}); !errors.Is(err, ErrNegativeSize) {
		t.Fatalf("DecodeOpen with a negative source size = %v", err)
	}
}

// FuzzDecodeRequest: the session decoders never panic, never read past
// their input, and what they decode encodes back to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'})
	f.Add([]byte{16, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 's', 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, n, err := DecodeRequest(b); err == nil {
			if n > len(b) {
				t.Fatalf("took %d of %d bytes", n, len(b))
			}
			if !r.BadSize {
				again, _ := r.Append(nil)
				if !bytes.Equal(again, b[:n]) {
					t.Fatalf("re-encoded %x, decoded from %x", again, b[:n])
				}
			}
		}
		if o, n, err := DecodeOpen(b); err == nil {
			if n > len(b) {
				t.Fatalf("open took %d of %d bytes", n, len(b))
			}
			again, _ := o.Append(nil)
			again[1] = b[1]
			if !bytes.Equal(again, append([]byte{16}, b[1:n]...)) {
				t.Fatalf("open re-encoded %x, decoded from %x", again, b[:n])
			}
		}
	})
}
