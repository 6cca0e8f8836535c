// Command gen-api-docs writes the API reference (docs/api-reference.md) from the
// generated CustomResourceDefinitions, so the reference documents exactly what the API
// server admits: every field with its type, default, validation and description.
//
//	go run ./hack/gen-api-docs -out docs/api-reference.md config/crd/bases/*.yaml
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"sigs.k8s.io/yaml"
)

func main() {
	out := flag.String("out", "", "file to write (standard output when empty)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: gen-api-docs [-out FILE] CRD.yaml...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		matches, err := filepath.Glob(filepath.Join("config", "crd", "bases", "*.yaml"))
		if err != nil {
			fail(err)
		}
		files = matches
	}
	if len(files) == 0 {
		fail(fmt.Errorf("no CRD files given and none in config/crd/bases"))
	}
	crds := make([]CRD, 0, len(files))
	for _, f := range files {
		crd, err := readCRD(f)
		if err != nil {
			fail(err)
		}
		crds = append(crds, crd)
	}
	sort.Slice(crds, func(i, j int) bool { return crds[i].Spec.Names.Kind < crds[j].Spec.Names.Kind })

	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fail(fmt.Errorf("create %s: %w", *out, err))
		}
		defer func() {
			if err := f.Close(); err != nil {
				fail(fmt.Errorf("close %s: %w", *out, err))
			}
		}()
		w = f
	}
	if err := Render(w, crds); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gen-api-docs:", err)
	os.Exit(1)
}

// CRD is the part of an apiextensions.k8s.io/v1 CustomResourceDefinition the reference
// needs.
type CRD struct {
	Kind string `json:"kind"`
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind       string   `json:"kind"`
			Plural     string   `json:"plural"`
			ShortNames []string `json:"shortNames"`
		} `json:"names"`
		Scope    string    `json:"scope"`
		Versions []Version `json:"versions"`
	} `json:"spec"`
}

// Version is one served version of a CRD.
type Version struct {
	Name                     string          `json:"name"`
	Served                   bool            `json:"served"`
	Storage                  bool            `json:"storage"`
	AdditionalPrinterColumns []PrinterColumn `json:"additionalPrinterColumns"`
	Schema                   struct {
		OpenAPIV3Schema *Schema `json:"openAPIV3Schema"`
	} `json:"schema"`
	Subresources map[string]any `json:"subresources"`
}

// PrinterColumn is a column of `kubectl get`.
type PrinterColumn struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	JSONPath string `json:"jsonPath"`
}

// Schema is the subset of a structural OpenAPI v3 schema that CRDs use.
type Schema struct {
	Type                 string             `json:"type"`
	Format               string             `json:"format"`
	Description          string             `json:"description"`
	Default              any                `json:"default"`
	Enum                 []any              `json:"enum"`
	Pattern              string             `json:"pattern"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	MinLength            *int64             `json:"minLength"`
	MaxLength            *int64             `json:"maxLength"`
	MinItems             *int64             `json:"minItems"`
	MaxItems             *int64             `json:"maxItems"`
	Required             []string           `json:"required"`
	Properties           map[string]*Schema `json:"properties"`
	Items                *Schema            `json:"items"`
	AdditionalProperties *Schema            `json:"additionalProperties"`
	IntOrString          bool               `json:"x-kubernetes-int-or-string"`
	PreserveUnknown      bool               `json:"x-kubernetes-preserve-unknown-fields"`
	ListType             string             `json:"x-kubernetes-list-type"`
	ListMapKeys          []string           `json:"x-kubernetes-list-map-keys"`
	Validations          []Validation       `json:"x-kubernetes-validations"`
}

// Validation is a CEL rule the API server checks on admission.
type Validation struct {
	Rule              string `json:"rule"`
	Message           string `json:"message"`
	MessageExpression string `json:"messageExpression"`
}

func readCRD(path string) (CRD, error) {
	var crd CRD
	data, err := os.ReadFile(path) //nolint:gosec // the paths are the CRD files named on the command line
	if err != nil {
		return crd, fmt.Errorf("read %s: %w", path, err)
	}
	if err := yaml.Unmarshal(data, &crd); err != nil {
		return crd, fmt.Errorf("parse %s: %w", path, err)
	}
	if crd.Kind != "CustomResourceDefinition" {
		return crd, fmt.Errorf("%s is a %q, not a CustomResourceDefinition", path, crd.Kind)
	}
	for _, v := range crd.Spec.Versions {
		if v.Schema.OpenAPIV3Schema == nil {
			return crd, fmt.Errorf("%s: version %s has no openAPIV3Schema", path, v.Name)
		}
	}
	return crd, nil
}
