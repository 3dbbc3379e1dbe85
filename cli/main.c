/* a2: the operator's command line. See docs/cli.md. */
#include "cli.h"

int main(int argc, char **argv)
{
    return a2__cli_main(argc, argv);
}
