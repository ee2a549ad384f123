#!/bin/bash
. "$OPENENV_CHECK"
check "build/index.html built" test -f site/build/index.html
check "pages joined in order" test "$(cat site/build/index.html 2>/dev/null)" = "$(cat "$TASK_DIR"/files/site/pages/header.html "$TASK_DIR"/files/site/pages/body.html "$TASK_DIR"/files/site/pages/footer.html)"
rm -rf site/build
check "a clean make builds it again" make -C site
check "rebuilt the same" test "$(cat site/build/index.html 2>/dev/null)" = "$(cat "$TASK_DIR"/files/site/pages/header.html "$TASK_DIR"/files/site/pages/body.html "$TASK_DIR"/files/site/pages/footer.html)"
finish
