// Command podfields prints the JSON field tree of core/v1 PodSpec, as the
// pinned k8s.io/api declares it, for kubelet/core_v1/data/podspec_fields.json.
// Struct types map to {json name: type}; a type is "" for a leaf (scalars and
// anything with its own JSON form, such as Quantity or Time), the struct's
// name, or that with "[]" (list) or "{}" (map) in front, repeated per level.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

var marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

type walker struct{ types map[string]map[string]string }

func (w *walker) ref(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer:
		return w.ref(t.Elem())
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "" // []byte: base64 text
		}
		if inner := w.ref(t.Elem()); inner != "" {
			return "[]" + inner
		}
		return ""
	case reflect.Map:
		if inner := w.ref(t.Elem()); inner != "" {
			return "{}" + inner
		}
		return ""
	case reflect.Struct:
		if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) {
			return ""
		}
		name := t.Name()
		if _, done := w.types[name]; !done {
			w.types[name] = map[string]string{} // before the fields: types can recurse
			w.fields(t, w.types[name])
		}
		return name
	}
	return ""
}

func (w *walker) fields(t reflect.Type, out map[string]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name := strings.Split(tag, ",")[0]
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(tag, ",inline")) {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			w.fields(ft, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = w.ref(f.Type)
	}
}

func main() {
	w := &walker{types: map[string]map[string]string{}}
	root := w.ref(reflect.TypeOf(v1.PodSpec{}))
	names := make([]string, 0, len(w.types))
	for n := range w.types {
		names = append(names, n)
	}
	sort.Strings(names)
	doc := map[string]any{"root": root, "types": w.types}
	if len(os.Args) > 1 {
		doc["source"] = os.Args[1]
	}
	out, err := json.MarshalIndent(doc, "", " ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(append(out, '\n'))
}
