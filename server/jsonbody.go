package server

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// A check's JSON body is read on every check that has one, so readParams
// reads its members in place: json.Valid checks the whole body (no
// allocation), then a scan that may trust its structure finds each
// member's name and raw value, and a plain string value is taken as it is.
// What it reads is what decodeObject reads (FuzzBodyMembers holds the two
// together); anything unusual — escapes, invalid UTF-8, a body that is not
// an object — goes the way of encoding/json.

// bodyMembers calls fn with each member of body, one JSON object, in order
// (a repeated name: each time, so the last wins), its name unescaped and its
// raw value. A body that is not one JSON object gets decodeObject's error.
func bodyMembers(body []byte, fn func(name string, raw []byte)) error {
	i := skipSpace(body, 0)
	if !json.Valid(body) || i == len(body) || body[i] != '{' {
		_, err := decodeObject(body)
		return err
	}
	i = skipSpace(body, i+1)
	for body[i] != '}' {
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		end := stringEnd(body, i)
		name := body[i:end]
		i = skipSpace(body, end)
		i = skipSpace(body, i+1) // past ':'
		vend := valueEnd(body, i)
		fn(jsonString(name), body[i:vend])
		i = skipSpace(body, vend)
	}
	return nil
}

// jsonString is the value of raw, a valid JSON string.
func jsonString(raw []byte) string {
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return string(in)
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid: json.Valid passed
	return s
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index after the JSON string starting at b[i] (a quote).
func stringEnd(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd is the index after the JSON value starting at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = stringEnd(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}
