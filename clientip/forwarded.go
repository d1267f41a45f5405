package clientip

import (
	"strings"

	"golang.org/x/net/http/httpguts"
)

// forwardedFors parses one Forwarded header line (RFC 7239 section 4) and
// returns the for= value of each element, left to right, unquoted; "" for an
// element without one. ok is false if the line is not valid syntax, or an
// element repeats a parameter.
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// Optional whitespace is accepted around "," and ";".
func forwardedFors(s string) (fors []string, ok bool) {
	p := forwardedParser{s: s}
	for {
		p.skipOWS()
		if p.eof() {
			return fors, true
		}
		if p.peek() == ',' { // empty list element
			p.i++
			continue
		}
		f, ok := p.element()
		if !ok {
			return nil, false
		}
		fors = append(fors, f)
		p.skipOWS()
		if p.eof() {
			return fors, true
		}
		if p.peek() != ',' {
			return nil, false
		}
		p.i++
	}
}

type forwardedParser struct {
	s string
	i int
}

func (p *forwardedParser) eof() bool  { return p.i >= len(p.s) }
func (p *forwardedParser) peek() byte { return p.s[p.i] }

func (p *forwardedParser) skipOWS() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.i++
	}
}

// element parses pairs up to the next "," or the end and returns the for=
// value.
func (p *forwardedParser) element() (forValue string, ok bool) {
	var seen [4]string // parameter names seen; RFC 7239 defines four
	nseen := 0
	for {
		p.skipOWS()
		if p.eof() || p.peek() == ',' {
			return forValue, true
		}
		if p.peek() == ';' { // empty pair
			p.i++
			continue
		}
		name := p.token()
		if name == "" || p.eof() || p.peek() != '=' {
			return "", false
		}
		p.i++
		var value string
		if !p.eof() && p.peek() == '"' {
			if value, ok = p.quoted(); !ok {
				return "", false
			}
		} else if value = p.token(); value == "" {
			return "", false
		}
		for _, n := range seen[:nseen] {
			if strings.EqualFold(n, name) {
				return "", false
			}
		}
		if nseen < len(seen) {
			seen[nseen] = name
			nseen++
		}
		if strings.EqualFold(name, "for") {
			forValue = value
		}
		p.skipOWS()
		if p.eof() || p.peek() == ',' {
			return forValue, true
		}
		if p.peek() != ';' {
			return "", false
		}
		p.i++
	}
}

// token scans an RFC 9110 token.
func (p *forwardedParser) token() string {
	start := p.i
	for !p.eof() && httpguts.IsTokenRune(rune(p.peek())) {
		p.i++
	}
	return p.s[start:p.i]
}

// quoted scans an RFC 9110 quoted-string and returns its content with
// quoted-pairs resolved.
func (p *forwardedParser) quoted() (string, bool) {
	p.i++ // opening quote
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.i++
		switch {
		case c == '"':
			return b.String(), true
		case c == '\\':
			if p.eof() {
				return "", false
			}
			c = p.peek()
			p.i++
			if c != '\t' && (c < 0x20 || c == 0x7f) {
				return "", false
			}
			b.WriteByte(c)
		case c == '\t' || c >= 0x20 && c != 0x7f:
			b.WriteByte(c)
		default:
			return "", false
		}
	}
	return "", false // unterminated
}
