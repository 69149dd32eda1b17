package web

import (
	"net/url"
	"strings"
)

// KeyPath percent-encodes a key or source for use as one URL path segment.
// Unlike url.PathEscape it also encodes '.', so that no key (".", "..",
// "a/../b") can be rewritten by path cleaning on the way to the handler:
// only ASCII letters, digits, '-', '_' and '~' stay as they are. Every byte
// round-trips, including bytes that are not UTF-8.
func KeyPath(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// unKeyPath reverses KeyPath (and any other percent-encoding).
func unKeyPath(s string) (string, error) {
	return url.PathUnescape(s)
}
