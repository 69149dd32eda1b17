package web

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// age formats a duration the way people read ages: its two largest units,
// "45s", "3m 12s", "2h 05m", "4d 03h".
func age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case d < time.Second:
		return "<1s"
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh %02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd %02dh", s/86400, s%86400/3600)
}

// count formats n with thin separators between thousands: 100,000.
func count(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + count(-n)
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// plural returns "1 key" or "3 keys".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return count(n) + " " + many
}

// size formats a byte count in binary units.
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// stamp is the exact time shown on hover.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// shortDuration formats a configured duration such as STUCK_AFTER: "10m".
func shortDuration(d time.Duration) string {
	s := d.String()
	for _, suffix := range []string{"m0s", "h0m"} {
		if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
			s = s[:len(s)-len(suffix)+1]
		}
	}
	return s
}

// printable reports whether s is valid UTF-8 without control characters,
// so that it can be shown as it is.
func printable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

// quoted shows s with its unprintable bytes as Go escapes (\xff, \n).
func quoted(s string) string { return strconv.Quote(s) }

// shown is s as text for places that take no markup (titles, attribute
// values): s itself when printable, else its quoted form. Pages thus stay
// valid UTF-8 whatever bytes a key holds.
func shown(s string) string {
	if printable(s) {
		return s
	}
	return quoted(s)
}

// sentence turns an error message into a sentence for a page: capital
// first letter, final period. Error values stay lower-case, as Go's are.
func sentence(msg string) string {
	if msg == "" {
		return msg
	}
	r, n := utf8.DecodeRuneInString(msg)
	msg = string(unicode.ToUpper(r)) + msg[n:]
	if !strings.HasSuffix(msg, ".") {
		msg += "."
	}
	return msg
}
