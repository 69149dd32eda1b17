package protocol

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Vectors is the shared test-vector file every client is tested against.
type Vectors struct {
	Actions map[string]int `json:"actions"`
	Frames  []struct {
		Name   string `json:"name"`
		Action int    `json:"action"`
		Key    string `json:"key"`
		Source string `json:"source"`
		Hex    string `json:"hex"`
	} `json:"frames"`
	Invalid []struct {
		Name   string `json:"name"`
		Action int    `json:"action"`
		Key    string `json:"key"`
		Source string `json:"source"`
	} `json:"invalid"`
	Answers []struct {
		Name string `json:"name"`
		Hex  string `json:"hex"`
		Char string `json:"char"`
	} `json:"answers"`
}

// vectorsPath is the shared vector file: $LC_VECTORS (as clients/run-tests
// sets it for every client), else the repository's copy, which the other
// clients read too, so that there is one file to keep right.
func vectorsPath() string {
	if p := os.Getenv("LC_VECTORS"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "wire", "testdata", "vectors.json")
}

// readVectors reads the shared vector file, failing t when it is missing.
func readVectors(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(vectorsPath())
	if err != nil {
		t.Fatalf("the shared test vectors (set LC_VECTORS outside the repository): %v", err)
	}
	return b
}

func loadVectors(t testing.TB) Vectors {
	t.Helper()
	var v Vectors
	if err := json.Unmarshal(readVectors(t), &v); err != nil {
		t.Fatalf("%s: %v", vectorsPath(), err)
	}
	if len(v.Frames) == 0 || len(v.Invalid) == 0 || len(v.Answers) != 3 {
		t.Fatalf("%s looks truncated: %d frames, %d invalid, %d answers", vectorsPath(), len(v.Frames), len(v.Invalid), len(v.Answers))
	}
	return v
}

func TestVectorsEncodeAndDecode(t *testing.T) {
	v := loadVectors(t)
	for _, fv := range v.Frames {
		t.Run(fv.Name, func(t *testing.T) {
			want, err := hex.DecodeString(fv.Hex)
			if err != nil {
				t.Fatal(err)
			}
			f := Frame{Action: Action(fv.Action), Key: fv.Key, Source: fv.Source}
			if err := f.Valid(); err != nil {
				t.Fatalf("Valid: %v", err)
			}
			got, err := f.Append(nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("Append = %x, %v; want %s", got, err, fv.Hex)
			}
			back, n, err := Decode(append(want, 0xff))
			if err != nil || n != len(want) || back != f {
				t.Fatalf("Decode = %+v, %d, %v; want %+v, %d", back, n, err, f, len(want))
			}
		})
	}
	for _, iv := range v.Invalid {
		t.Run("invalid/"+iv.Name, func(t *testing.T) {
			f := Frame{Action: Action(iv.Action), Key: iv.Key, Source: iv.Source}
			if err := f.Valid(); err == nil {
				t.Fatal("Valid accepted a frame the vectors call invalid")
			}
		})
	}
	answers := map[string]byte{"+": AnswerOK, "-": AnswerFail, "#": AnswerLocked}
	for _, a := range v.Answers {
		b, _ := hex.DecodeString(a.Hex)
		if len(b) != 1 || answers[a.Char] != b[0] {
			t.Errorf("answer %q: hex %s does not match the codec's byte", a.Name, a.Hex)
		}
	}
	names := map[string]Action{"lock": Lock, "unlock": Unlock, "reset_by_key": ResetByKey, "reset_by_source": ResetBySource, "trylock": TryLock}
	for name, n := range v.Actions {
		if names[name] != Action(n) {
			t.Errorf("vectors say action %s = %d; the codec says %d", name, n, names[name])
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"nothing", nil, ErrShort},
		{"action only", []byte{1}, ErrShort},
		{"key cut", []byte{1, 3, 'a'}, ErrShort},
		{"no source size", []byte{1, 1, 'a'}, ErrShort},
		{"source cut", []byte{1, 1, 'a', 2, 's'}, ErrShort},
		{"negative key size", []byte{1, 0x80}, ErrNegativeSize},
		{"negative source size", []byte{1, 1, 'a', 0xff}, ErrNegativeSize},
	}
	for _, c := range cases {
		if _, _, err := Decode(c.in); !errors.Is(err, c.want) {
			t.Errorf("%s: Decode(%x) = %v, want %v", c.name, c.in, err, c.want)
		}
	}
	for _, f := range []Frame{
		{Action: 0, Key: "k"}, {Action: 6, Key: "k"}, {Action: 16, Key: "k"},
		{Action: Lock}, {Action: Unlock}, {Action: ResetByKey}, {Action: TryLock},
	} {
		if err := f.Valid(); err == nil {
			t.Errorf("Valid(%+v) = nil", f)
		}
	}
	if err := (Frame{Action: ResetBySource}).Valid(); err != nil {
		t.Errorf("ResetBySource with no key nor source: %v", err)
	}
}

// FuzzDecode checks that no input makes Decode panic or read past its
// input, and that whatever it accepts re-encodes to the same bytes.
func FuzzDecode(f *testing.F) {
	v := loadVectors(f)
	for _, fv := range v.Frames {
		b, _ := hex.DecodeString(fv.Hex)
		f.Add(b)
	}
	f.Add([]byte{1, 0x80})
	f.Add([]byte{4, 0, 0})
	f.Add([]byte{1, 127})
	f.Fuzz(func(t *testing.T, in []byte) {
		fr, n, err := Decode(in)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n = %d", err, n)
			}
			return
		}
		if n > len(in) || n > MaxFrame {
			t.Fatalf("n = %d for %d bytes", n, len(in))
		}
		out, err := fr.Append(nil)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(out, in[:n]) {
			t.Fatalf("re-encoded %x, decoded from %x", out, in[:n])
		}
	})
}
