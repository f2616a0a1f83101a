// Command kubelet-account writes what the upstream kubelet of the pinned
// release accepts, read from its own Go types, flag set and feature gate
// registry (not from documentation), as JSON Lines files the Python side
// checks its account against. It also writes the files kubeadm of the same
// release puts on a node, by calling kubeadm's own code.
//
// Run through hack/gen-kubelet-account.sh, which builds it in a module that
// pins k8s.io/kubernetes and its staging repositories.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"

	// The kubelet binary's own imports, so the gate registry holds exactly
	// what the binary's does (these register gates and log formats).
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	_ "k8s.io/kubernetes/cmd/kubelet/app"
)

const kubeletMain = "k8s.io/kubernetes/cmd/kubelet"

var jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

func main() {
	out := flag.String("out", "", "directory for fields.jsonl, flags.jsonl, gates.jsonl")
	kubeadmOut := flag.String("kubeadm-out", "", "directory for the kubeadm and kind node files")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "-out is required")
		os.Exit(2)
	}
	src := sources()
	fields, v1Paths := configFields()
	flags := flagSet(v1Paths)
	gates := featureGates()
	must(writeJSONL(filepath.Join(*out, "fields.jsonl"), src, fields))
	must(writeJSONL(filepath.Join(*out, "flags.jsonl"), src, flags))
	must(writeJSONL(filepath.Join(*out, "gates.jsonl"), src, gates))
	if *kubeadmOut != "" {
		must(writeKubeadmFiles(*kubeadmOut))
	}
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// sources names the module versions everything here was read from.
func sources() map[string]any {
	out := map[string]any{}
	for _, mod := range []string{"k8s.io/kubernetes", "k8s.io/kubelet", "k8s.io/component-base", "k8s.io/apiserver"} {
		b, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", mod).Output()
		must(err)
		out[mod] = strings.TrimSpace(string(b))
	}
	return map[string]any{"source": out, "generator": "hack/gen-kubelet-account.sh"}
}

func writeJSONL(path string, header map[string]any, rows []map[string]any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return encodeLines(f, header, rows)
}

func encodeLines(w io.Writer, header map[string]any, rows []map[string]any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(header); err != nil {
		return err
	}
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// ---- KubeletConfiguration fields ----

type leaf struct {
	goPath   string
	jsonPath string
	typ      reflect.Type
	pointer  bool // nil-able in Go: a default applies only when absent
}

// leaves walks a config struct into nested structs (through pointers), and
// stops at anything with its own JSON form, slices and maps.
func leaves(t reflect.Type, goPrefix, jsonPrefix string, underPtr bool, out *[]leaf) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Name() != "TypeMeta" && strings.Contains(f.Tag.Get("json"), ",inline") {
			leaves(f.Type, goPrefix, jsonPrefix, underPtr, out) // promoted fields
			continue
		}
		if f.Anonymous || f.PkgPath != "" {
			continue // TypeMeta and unexported fields
		}
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "" || name == "-" {
			continue
		}
		ft := f.Type
		ptr := underPtr
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
			ptr = true
		}
		gp, jp := goPrefix+f.Name, jsonPrefix+name
		if ft.Kind() == reflect.Struct && !ft.Implements(jsonMarshaler) && !reflect.PointerTo(ft).Implements(jsonMarshaler) {
			leaves(ft, gp+".", jp+".", ptr, out)
			continue
		}
		k := ft.Kind()
		*out = append(*out, leaf{gp, jp, f.Type, ptr || k == reflect.Slice || k == reflect.Map})
	}
}

func typeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.String() {
	case "v1.Duration":
		return "duration"
	case "v1.TimeOrMetaDuration":
		return "duration_or_ns"
	case "resource.QuantityValue", "resource.Quantity":
		return "quantity"
	}
	switch t.Kind() {
	case reflect.Slice:
		return "[]" + typeName(t.Elem())
	case reflect.Map:
		return "map[" + typeName(t.Key()) + "]" + typeName(t.Elem())
	case reflect.Struct:
		return "object"
	case reflect.Interface:
		return "any"
	}
	return t.Kind().String()
}

func lookup(doc map[string]any, path string) (any, bool) {
	var cur any = doc
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func toDoc(v any) map[string]any {
	b, err := json.Marshal(v)
	must(err)
	var doc map[string]any
	must(json.Unmarshal(b, &doc))
	return doc
}

// configFields lists every leaf of KubeletConfiguration v1beta1 with the
// default the kubelet's scheme gives it, and when that default applies.
func configFields() ([]map[string]any, map[string]string) {
	var ls []leaf
	leaves(reflect.TypeOf(kubeletv1beta1.KubeletConfiguration{}), "", "", false, &ls)

	scheme, _, err := kubeletscheme.NewSchemeAndCodecs()
	must(err)
	defaulted := &kubeletv1beta1.KubeletConfiguration{}
	scheme.Default(defaulted)
	defDoc := toDoc(defaulted)
	zeroDoc := toDoc(&kubeletv1beta1.KubeletConfiguration{})

	paths := pathFields()
	goToJSON := map[string]string{}
	var rows []map[string]any
	for _, l := range ls {
		goToJSON[l.goPath] = l.jsonPath
		def, hasDef := lookup(defDoc, l.jsonPath)
		zero, _ := lookup(zeroDoc, l.jsonPath)
		when := "never"
		if hasDef && !reflect.DeepEqual(def, zero) {
			when = "zero"
			if l.pointer {
				when = "absent"
			}
		}
		if !hasDef {
			def = nil
		}
		rows = append(rows, map[string]any{
			"path":         l.jsonPath,
			"go":           l.goPath,
			"type":         typeName(l.typ),
			"default":      def,
			"defaultWhen":  when,
			"relativePath": paths[l.goPath],
		})
	}
	return rows, goToJSON
}

// pathFields: the fields whose relative paths the kubelet resolves against
// the config file's directory (KubeletConfigurationPathRefs).
func pathFields() map[string]bool {
	kc := &kubeletconfig.KubeletConfiguration{}
	addrs := fieldAddrs(reflect.ValueOf(kc).Elem(), "")
	out := map[string]bool{}
	for _, p := range kubeletconfig.KubeletConfigurationPathRefs(kc) {
		for _, gp := range addrs[uintptr(reflect.ValueOf(p).Pointer())] {
			out[gp] = true
		}
	}
	return out
}

// fieldAddrs maps the address of every field (at every depth, and the data
// pointer of every non-nil map) to its Go path.
func fieldAddrs(v reflect.Value, prefix string) map[uintptr][]string {
	out := map[uintptr][]string{}
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			fv := v.Field(i)
			gp := prefix + f.Name
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(fv, prefix) // embedded: its fields are promoted
				continue
			}
			if fv.CanAddr() {
				a := fv.Addr().Pointer()
				out[a] = append(out[a], gp)
			}
			if fv.Kind() == reflect.Map && !fv.IsNil() {
				out[fv.Pointer()] = append(out[fv.Pointer()], gp)
			}
			if fv.Kind() == reflect.Struct {
				walk(fv, gp+".")
			}
		}
	}
	walk(v, prefix)
	return out
}

// ---- flags ----

// valuePointers: the pointers a pflag.Value holds, directly or in its
// struct fields, so a flag can be matched to the field it writes.
func valuePointers(v reflect.Value, depth int) []uintptr {
	if depth > 3 || !v.IsValid() {
		return nil
	}
	switch v.Kind() {
	case reflect.Interface:
		return valuePointers(v.Elem(), depth)
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		return []uintptr{v.Pointer()}
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		out := []uintptr{v.Pointer()}
		return append(out, valuePointers(v.Elem(), depth+1)...)
	case reflect.Struct:
		var out []uintptr
		for i := 0; i < v.NumField(); i++ {
			out = append(out, valuePointers(v.Field(i), depth+1)...)
		}
		return out
	}
	return nil
}

func deepest(paths []string) string {
	best := ""
	for _, p := range paths {
		if len(p) > len(best) {
			best = p
		}
	}
	return best
}

// v1Leaf: the v1beta1 JSON path of the leaf the internal Go path is in.
func v1Leaf(goPath string, goToJSON map[string]string) string {
	for p := goPath; p != ""; {
		if jp, ok := goToJSON[p]; ok {
			return jp
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return ""
}

func flagSet(goToJSON map[string]string) []map[string]any {
	kf := options.NewKubeletFlags()
	kc, err := options.NewKubeletConfiguration()
	must(err)
	groups := map[string]*pflag.FlagSet{
		"instance": pflag.NewFlagSet("instance", pflag.ContinueOnError),
		"config":   pflag.NewFlagSet("config", pflag.ContinueOnError),
		"global":   pflag.NewFlagSet("global", pflag.ContinueOnError),
	}
	// The same calls, in the same order, as NewKubeletCommand's flag set.
	kf.AddFlags(groups["instance"])
	options.AddKubeletConfigFlags(groups["config"], kc)
	options.AddGlobalFlags(groups["global"])
	groups["global"].BoolP("help", "h", false, "help for kubelet")

	cfgAddrs := fieldAddrs(reflect.ValueOf(kc).Elem(), "")
	flagAddrs := fieldAddrs(reflect.ValueOf(kf).Elem(), "")
	var rows []map[string]any
	for _, group := range []string{"instance", "config", "global"} {
		groups[group].SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
		groups[group].VisitAll(func(f *pflag.Flag) {
			var cfgPaths, instPaths []string
			for _, p := range valuePointers(reflect.ValueOf(f.Value), 0) {
				cfgPaths = append(cfgPaths, cfgAddrs[p]...)
				instPaths = append(instPaths, flagAddrs[p]...)
			}
			field, instance := "", deepest(instPaths)
			if gp := deepest(cfgPaths); gp != "" {
				// A field of the internal type only (--runonce) is instance state.
				if field = v1Leaf(gp, goToJSON); field == "" {
					instance = gp
				}
			}
			if group == "config" && field == "" && instance == "" {
				must(fmt.Errorf("config flag --%s: no field found", f.Name))
			}
			rows = append(rows, map[string]any{
				"name":       f.Name,
				"shorthand":  f.Shorthand,
				"type":       f.Value.Type(),
				"default":    f.DefValue,
				"noOptValue": f.NoOptDefVal,
				"deprecated": f.Deprecated,
				"hidden":     f.Hidden,
				"group":      group,
				"field":      field,
				"instance":   instance,
				"usage":      f.Usage,
			})
		})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i]["name"].(string) < rows[j]["name"].(string) })
	return rows
}

// ---- feature gates ----

func featureGates() []map[string]any {
	gate := utilfeature.DefaultMutableFeatureGate
	emulated := gate.EmulationVersion()
	node, linked := gateReferences(gate)
	var rows []map[string]any
	for name, specs := range gate.GetAllVersioned() {
		sort.Sort(specs)
		var versions []map[string]any
		var current *featuregate.FeatureSpec
		for i := range specs {
			s := specs[i]
			versions = append(versions, map[string]any{
				"version": s.Version.String(),
				"default": s.Default,
				"stage":   stage(s.PreRelease),
				"locked":  s.LockToDefault,
			})
			if !s.Version.GreaterThan(emulated) {
				current = &specs[i]
			}
		}
		row := map[string]any{
			"name":         string(name),
			"versions":     versions,
			"nodeReads":   node[string(name)],
			"linkedReads": linked[string(name)] && !node[string(name)],
		}
		if current == nil {
			row["default"], row["stage"], row["locked"] = false, "PRE-ALPHA", false
		} else {
			row["default"], row["stage"], row["locked"] = current.Default, stage(current.PreRelease), current.LockToDefault
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i]["name"].(string) < rows[j]["name"].(string) })
	return rows
}

func stage(p any) string {
	s := fmt.Sprint(p)
	if s == "" {
		return "GA"
	}
	return s
}

// nodePackages: the import path prefixes of node code: the kubelet itself and
// the libraries whose behaviour it is (volumes, probes, security context, the
// API and CRI clients, logging and metrics). Packages linked in for other
// reasons (API validation, the API server's and scheduler's libraries) are
// not: a gate read only there changes nothing a node does.
var nodePackages = []string{
	"k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/pkg/kubelet/", "k8s.io/kubernetes/pkg/volume/",
	"k8s.io/kubernetes/pkg/securitycontext", "k8s.io/kubernetes/pkg/credentialprovider",
	"k8s.io/kubernetes/pkg/probe", "k8s.io/kubernetes/pkg/util/", "k8s.io/kubernetes/pkg/api/v1/",
	"k8s.io/kubernetes/pkg/api/pod", "k8s.io/component-base/", "k8s.io/client-go/", "k8s.io/cri-client/",
	"k8s.io/mount-utils", "k8s.io/component-helpers/", "k8s.io/dynamic-resource-allocation/",
}

func isNodePackage(path string) bool {
	for _, p := range nodePackages {
		if strings.HasPrefix(path, p) || path == strings.TrimSuffix(p, "/") {
			return true
		}
	}
	return false
}

// gateReferences: the gates that node code linked into the kubelet binary
// names outside the gate registrations themselves (constant declarations and
// the keys of the spec maps), and those only other linked packages name. It
// over-approximates "the kubelet reads it": a package may read a gate on a
// path the kubelet never takes, and a name may match an unrelated identifier.
func gateReferences(gate featuregate.MutableVersionedFeatureGate) (node, linked map[string]bool) {
	names := map[string]bool{}
	for n := range gate.GetAllVersioned() {
		names[string(n)] = true
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}|{{.Dir}}|{{join .GoFiles \",\"}}", kubeletMain).Output()
	must(err)
	node, linked = map[string]bool{}, map[string]bool{}
	fset := token.NewFileSet()
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 || parts[2] == "" {
			continue
		}
		found := linked
		if isNodePackage(parts[0]) {
			found = node
		}
		for _, name := range strings.Split(parts[2], ",") {
			f, err := parser.ParseFile(fset, filepath.Join(parts[1], name), nil, parser.SkipObjectResolution)
			must(err)
			markReferences(f, names, found)
		}
	}
	return node, linked
}

func markReferences(f *ast.File, names, found map[string]bool) {
	skip := map[ast.Node]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.ValueSpec:
			for _, id := range x.Names {
				skip[id] = true
			}
		case *ast.KeyValueExpr:
			skip[x.Key] = true
			if sel, ok := x.Key.(*ast.SelectorExpr); ok {
				skip[sel.Sel] = true
			}
		case *ast.Ident:
			if !skip[x] && names[x.Name] {
				found[x.Name] = true
			}
		}
		return true
	})
}
