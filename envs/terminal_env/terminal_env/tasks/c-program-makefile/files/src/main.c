#include <stdio.h>
#include "mathx.h"

int main(void) {
    int values[] = {1, 2, 3, 4, 5};
    printf("sum=%d\n", sum(values, 5));
    return 0;
}
