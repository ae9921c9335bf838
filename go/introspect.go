package shmring

import "reflect"

// cStructFields are the field names of a C struct as cgo sees it (for the tests
// that check a Go type translates every field of its C struct).
func cStructFields(v interface{}) []string {
	t := reflect.TypeOf(v)
	out := make([]string, 0, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		out = append(out, t.Field(i).Name)
	}
	return out
}
