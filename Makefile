# hookkeeper: build, generate, test and run. `make help` lists the targets.
#
# Every tool is pinned by a Go module under hack/tools/ and built into bin/ the first
# time it is needed; later runs reuse bin/ and the Go build cache.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c

GO        ?= go
BIN       := $(CURDIR)/bin
IMG       ?= hookkeeper:latest
# Image metadata (make image, make docker-build): version from git, OCI labels.
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION     ?= $(shell git rev-parse HEAD 2>/dev/null)
CREATED      ?= $(shell git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
IMAGE_SOURCE ?= https://github.com/hookkeeper/hookkeeper
PLATFORMS    ?= linux/amd64,linux/arm64
# Packages whose tests `make test` runs: everything, including test/e2e.
TEST_PKGS ?= ./...
TEST_FLAGS ?= -count=1 -timeout 45m

CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT  := $(BIN)/golangci-lint
HELM           := $(BIN)/helm
KUSTOMIZE      := $(BIN)/kustomize
# One binary (hack/tools/controlplane) runs as each of these names; the names are links to it.
CONTROLPLANE_COMPONENTS := etcd kube-apiserver kube-controller-manager kube-scheduler
CONTROLPLANE   := $(BIN)/controlplane $(addprefix $(BIN)/,$(CONTROLPLANE_COMPONENTS))
# Tools are built without symbol tables or DWARF: smaller, and faster to link.
TOOL_LDFLAGS   := -s -w
# hack/step.sh prints what a step builds, its first-run time and progress while it runs.
STEP           := $(CURDIR)/hack/step.sh
HOOKKEEPER     := $(BIN)/hookkeeper
# The data plane alone (receiver, migrate, version): what receiver and migration pods run.
HOOKKEEPER_RECEIVER := $(BIN)/hookkeeper-receiver
IMAGE_TOOL     := $(BIN)/hookkeeper-image
# The linux/amd64 image test/image runs in podman (kept while its inputs are unchanged).
IMAGE_TEST_ARCHIVE := $(BIN)/hookkeeper-linux-amd64.oci.tar
GO_LDFLAGS      = -X github.com/hookkeeper/hookkeeper/internal/version.Version=$(VERSION) -X github.com/hookkeeper/hookkeeper/internal/version.Revision=$(REVISION)
IMAGE_FLAGS     = -root $(CURDIR) -version $(VERSION) -revision "$(REVISION)" -created "$(CREATED)" -source $(IMAGE_SOURCE)

export KUBEBUILDER_ASSETS := $(BIN)
export HOOKKEEPER_BIN_DIR := $(BIN)
# One set of compile flags for every go command make runs (build, vet, test, the demo and
# the control plane): the Go build cache keys each compiled package by its flags, so a
# package that hookkeeper, its tests and the control plane share (client-go, the API types,
# gRPC, ...) compiles once instead of once per flag set. The control plane's module pins
# the same versions as ours for the same reason (test/toolchain checks both).
export CGO_ENABLED := 0
export GOFLAGS := $(strip -trimpath $(GOFLAGS))

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC from markers; copy both into the chart (CI checks they are committed).
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths="./api/...;./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@mkdir -p charts/hookkeeper/crds
	cp config/crd/bases/*.yaml charts/hookkeeper/crds/
	cp config/rbac/role.yaml charts/hookkeeper/files/manager-role.yaml

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths="./api/..."

.PHONY: api-docs
api-docs: manifests ## Regenerate docs/api-reference.md from the CRD.
	$(GO) run ./hack/gen-api-docs config/crd/bases/*.yaml > docs/api-reference.md

.PHONY: provider-docs
provider-docs: ## Regenerate the provider table of docs/providers.md from internal/provider.
	$(GO) test ./internal/provider -run '^TestProviderTable$$' -update

.PHONY: fmt
fmt: ## gofmt the tree.
	$(GO) fmt ./...

.PHONY: vet
vet: ## go vet the tree.
	@$(STEP) vet -- $(GO) vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: manifests generate fmt vet tools build image-test-archive ## Run every test: unit, PostgreSQL, envtest, manifests, e2e and the image in podman.
	@echo "    go test $(TEST_PKGS): PostgreSQL from TEST_DATABASE_URL, else 127.0.0.1:5432, else a throwaway server"
	@HOOKKEEPER_BINARY=$(HOOKKEEPER) HOOKKEEPER_IMAGE_ARCHIVE=$(IMAGE_TEST_ARCHIVE) $(STEP) go-test -- $(GO) test $(TEST_FLAGS) $(TEST_PKGS)

.PHONY: test-e2e
test-e2e: tools build ## Run only the end-to-end suite on the local cluster.
	HOOKKEEPER_BINARY=$(HOOKKEEPER) $(GO) test $(TEST_FLAGS) -v ./test/e2e/...

.PHONY: bench
bench: tools build image-test-archive ## Run the receiver, dispatcher and image benchmarks and print their table (the receiver as built into the image).
	HOOKKEEPER_BINARY=$(HOOKKEEPER) $(GO) run ./test/bench -hookkeeper $(BIN)/image-build/linux-amd64/hookkeeper-receiver \
		-image-tool $(IMAGE_TOOL) -image-archive $(IMAGE_TEST_ARCHIVE)

SOAK_DURATION ?= 30m
.PHONY: soak
soak: ## Drive a receiver for SOAK_DURATION (30m) with retention pruning, printing latency and table sizes per minute.
	@# A throwaway server of its own: PostgreSQL's defaults (autovacuum on), whatever the
	@# local server's settings are.
	TEST_POSTGRES=throwaway SOAK_DURATION=$(SOAK_DURATION) $(GO) test ./test/soak -run '^TestSoak$$' -count=1 -v -timeout 0

##@ Build

.PHONY: build
build: ## Build bin/hookkeeper and bin/hookkeeper-receiver.
	@$(STEP) hookkeeper -- $(GO) build -ldflags "$(GO_LDFLAGS)" -o $(HOOKKEEPER) ./cmd/hookkeeper
	@$(STEP) hookkeeper-receiver -- $(GO) build -ldflags "$(GO_LDFLAGS)" -o $(HOOKKEEPER_RECEIVER) ./cmd/hookkeeper-receiver

.PHONY: run
run: manifests generate ## Run the operator against the cluster in ~/.kube/config.
	$(GO) run ./cmd/hookkeeper manager --leader-elect=false

.PHONY: dev
dev: ## Start the local cluster with the samples and the scripted demo (builds only hookkeeper and the control plane).
	@# First run: the control plane takes minutes to build, so show the product first: the
	@# demo without a cluster (hack/demo links no Kubernetes client, so it builds in about
	@# a third of hookkeeper's time), then build the rest and start the cluster.
	@if ! $(MAKE) -s -q controlplane; then mkdir -p $(BIN) && \
		$(STEP) demo -- $(GO) build -o $(BIN)/hookkeeper-demo ./hack/demo && $(BIN)/hookkeeper-demo; fi
	@$(MAKE) -s build controlplane
	$(HOOKKEEPER) dev --demo --bin-dir $(BIN)

.PHONY: image
image: $(IMAGE_TOOL) ## Build the OCI image index (linux/amd64, linux/arm64) into bin/image without Docker; print digests and sizes.
	$(IMAGE_TOOL) build $(IMAGE_FLAGS) -platforms $(PLATFORMS) -layout $(BIN)/image -ref-name $(VERSION)

.PHONY: image-archive
image-archive: $(IMAGE_TOOL) ## Like image, but also write bin/hookkeeper.oci.tar (an OCI archive of the index).
	$(IMAGE_TOOL) build $(IMAGE_FLAGS) -platforms $(PLATFORMS) -layout $(BIN)/image -archive $(BIN)/hookkeeper.oci.tar -ref-name $(VERSION)

.PHONY: image-test-archive
image-test-archive: $(IMAGE_TOOL) ## Build the linux/amd64 image as an OCI archive for test/image (kept when unchanged).
	@$(STEP) image-test-archive -- $(IMAGE_TOOL) build $(IMAGE_FLAGS) -platforms linux/amd64 -archive $(IMAGE_TEST_ARCHIVE) -ref-name hookkeeper:$(VERSION)

.PHONY: image-test-load
image-test-load: image-test-archive ## Load the linux/amd64 image into podman (needs podman).
	podman load --input $(IMAGE_TEST_ARCHIVE)

.PHONY: image-sizes
image-sizes: $(IMAGE_TOOL) ## Print platform, digest and compressed bytes of each image in bin/image (IMAGE_SIZES_FLAGS=-json for JSON).
	$(IMAGE_TOOL) sizes -layout $(BIN)/image $(IMAGE_SIZES_FLAGS)

.PHONY: docker-build
docker-build: ## Build the same image with a Docker engine (one platform; see docs/image.md).
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		--build-arg CREATED=$(CREATED) --build-arg SOURCE=$(IMAGE_SOURCE) -t $(IMG) .

.PHONY: build-installer
build-installer: manifests $(KUSTOMIZE) ## Write dist/install.yaml (CRDs, RBAC, operator).
	@mkdir -p dist
	cd config/manager && $(KUSTOMIZE) edit set image hookkeeper=$(IMG)
	$(KUSTOMIZE) build config/default > dist/install.yaml
	@echo "wrote dist/install.yaml"

.PHONY: helm-lint
helm-lint: $(HELM) ## Lint the Helm chart.
	$(HELM) lint charts/hookkeeper

##@ Deployment

.PHONY: install
install: manifests $(KUSTOMIZE) ## Install the CRDs into the cluster in ~/.kube/config.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: manifests $(KUSTOMIZE) ## Remove the CRDs.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found -f -

.PHONY: deploy
deploy: manifests $(KUSTOMIZE) ## Deploy the operator to the cluster in ~/.kube/config.
	cd config/manager && $(KUSTOMIZE) edit set image hookkeeper=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: $(KUSTOMIZE) ## Remove the operator.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

##@ Tools (pinned in hack/tools/*/go.mod, built into bin/)

.PHONY: tools
tools: $(CONTROLLER_GEN) $(HELM) $(KUSTOMIZE) controlplane ## Build every tool the tests need.

.PHONY: controlplane
controlplane: $(CONTROLPLANE) ## Build etcd and the Kubernetes control plane: one binary, linked as each component.

$(IMAGE_TOOL): hack/image/go.mod hack/image/go.sum $(wildcard hack/image/*.go)
	@cd hack/image && $(STEP) image-tool -- $(GO) build -o $@ .

$(CONTROLLER_GEN): hack/tools/controller-gen/go.mod
	@cd hack/tools/controller-gen && $(STEP) controller-gen -- $(GO) build -ldflags='$(TOOL_LDFLAGS)' -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT): hack/tools/golangci-lint/go.mod
	@cd hack/tools/golangci-lint && $(STEP) golangci-lint -- $(GO) build -ldflags='$(TOOL_LDFLAGS)' -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

$(HELM): hack/tools/helm/go.mod
	@cd hack/tools/helm && $(STEP) helm -- $(GO) build -ldflags='$(TOOL_LDFLAGS)' -o $@ helm.sh/helm/v3/cmd/helm

$(KUSTOMIZE): hack/tools/kustomize/go.mod
	@cd hack/tools/kustomize && $(STEP) kustomize -- $(GO) build -ldflags='$(TOOL_LDFLAGS)' -o $@ sigs.k8s.io/kustomize/kustomize/v5

$(BIN)/controlplane: hack/tools/controlplane/go.mod hack/tools/controlplane/go.sum hack/tools/controlplane/main.go
	@cd hack/tools/controlplane && $(STEP) controlplane -- $(GO) build -ldflags='$(TOOL_LDFLAGS)' -o $@ .

$(addprefix $(BIN)/,$(CONTROLPLANE_COMPONENTS)): $(BIN)/controlplane
	ln -sf controlplane $@
