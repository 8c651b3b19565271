#!/bin/sh
# The image's entrypoint. `server` (the default) writes $KRAFT_HOME/server.properties from the
# environment, formats storage on the first start, then runs `kraft server-start`.
#
# Environment -> properties: KRAFT_<KEY> becomes <key> with "_" as "." and lower case, e.g.
#   KRAFT_NODE_ID=1                           node.id=1
#   KRAFT_PROCESS_ROLES=controller            process.roles=controller
#   KRAFT_CONTROLLER_QUORUM_VOTERS=1@controller-1:9093,...
#   KRAFT_LISTENERS=CONTROLLER://0.0.0.0:9093
#   KRAFT_ADVERTISED_LISTENERS=CONTROLLER://controller-1:9093
# except KRAFT_CLUSTER_ID (the cluster id to format with; required) and KRAFT_HOME.
# Defaults: metadata.log.dir=$KRAFT_HOME/metadata, log.dirs=$KRAFT_HOME/data.
# Any other command runs as given, e.g. `kraft topics ...` or `metadata-shell ...`.
set -eu
: "${KRAFT_HOME:=/var/lib/kraft}"

if [ "${1:-server}" != "server" ]; then
    exec "$@"
fi

props="$KRAFT_HOME/server.properties"
{
    echo "# written by kraft-entrypoint from KRAFT_* environment variables"
    echo "metadata.log.dir=$KRAFT_HOME/metadata"
    echo "log.dirs=$KRAFT_HOME/data"
    env | sort | while IFS='=' read -r name value; do
        case "$name" in
            KRAFT_CLUSTER_ID|KRAFT_HOME) ;;
            KRAFT_*)
                key=$(printf '%s' "${name#KRAFT_}" | tr 'A-Z_' 'a-z.')
                printf '%s=%s\n' "$key" "$value" ;;
        esac
    done
} > "$props.tmp"
mv "$props.tmp" "$props"

if [ -z "${KRAFT_CLUSTER_ID:-}" ]; then
    echo "kraft-entrypoint: set KRAFT_CLUSTER_ID (e.g. from \`kraft storage random-uuid\`)" >&2
    exit 1
fi
kraft storage format --cluster-id "$KRAFT_CLUSTER_ID" --config "$props" --ignore-formatted
exec kraft server-start "$props"
