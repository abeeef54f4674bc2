# Sourced by .ci/run (see the conventions at its top). Builds the AWS Lambda
# Runtime Interface Emulator (RIE) for lambdasqs's end-to-end test
# (lambdasqs/rie_test.go) and exports SQSCONSUMER_LAMBDA_RIE, the path of
# the aws-lambda-rie binary. The test starts the emulator itself (one per
# simulated execution environment, on free loopback ports) and stops it.
#
# The emulator is the Go module
# github.com/aws/aws-lambda-runtime-interface-emulator; the module proxy
# serves it as a pseudo-version (the repository's tags are not Go module
# versions), pinned below. The binary is cached per version, so a second
# run only checks that it is there. No network is needed once it is built.
#
# By hand: source .ci/setup.d/50-lambda-rie.sh && (cd lambdasqs && go test -race ./...)
#
# To upgrade: `go list -m github.com/aws/aws-lambda-runtime-interface-emulator@latest`
# prints the newest pseudo-version; put it below and run the test.

rie_version=v0.0.0-20261030222936-bef5c4ba774d
rie_dir=${XDG_CACHE_HOME:-$HOME/.cache}/sqsconsumer/lambda-rie/$rie_version
if [[ ! -x $rie_dir/aws-lambda-rie ]]; then
  ci_log "building aws-lambda-rie $rie_version"
  mkdir -p "$rie_dir"
  # Outside any module or workspace of this repository: the emulator's own
  # go.mod decides its dependencies.
  if ! (cd "$rie_dir" && GOWORK=off GOFLAGS= GOBIN=$rie_dir \
    go install "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$rie_version" >"$CI_TMP/lambda-rie-build.log" 2>&1); then
    ci_fail_with_log "$CI_TMP/lambda-rie-build.log" "building aws-lambda-rie $rie_version failed"
    return 1
  fi
fi
export SQSCONSUMER_LAMBDA_RIE=$rie_dir/aws-lambda-rie
ci_log "aws-lambda-rie $rie_version: SQSCONSUMER_LAMBDA_RIE=$SQSCONSUMER_LAMBDA_RIE"
unset rie_version rie_dir
