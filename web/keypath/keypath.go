// Package keypath encodes a lock key (or a source) as one URL path segment
// and back. The dashboard, the JSON API and lc-cli share it, so a key
// written into a URL by one is read back byte for byte by the other.
//
// Guarantee: Decode(Encode(k)) == k for every string k, including bytes
// that are not UTF-8, and no encoded key contains '/' or '.', so path
// cleaning on the way to a handler cannot rewrite it ("..", "a/../b").
package keypath

import "net/url"

// Encode percent-encodes key for use as one URL path segment. Unlike
// url.PathEscape it also encodes '.': only ASCII letters, digits, '-', '_'
// and '~' stay as they are.
func Encode(key string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

// Decode reverses Encode, and any other percent-encoding of a path
// segment.
func Decode(segment string) (string, error) {
	return url.PathUnescape(segment)
}
